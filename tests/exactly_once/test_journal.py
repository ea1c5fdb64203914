"""The request journal on its own: what it keeps, for how long, and what a torn or full disk
does to it (SPEC §8.2)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from clawpod.sidecar.model.canonical import digest
from clawpod.sidecar.model.conversation import ToolCall, ToolOutcome
from clawpod.sidecar.state.journal import (
    JournalQuotaReached,
    RequestJournal,
    Rewrite,
    call_key,
    request_digest,
)
from tests.mediation.scripted import TRADE

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Buy."}]}
CALL = ToolCall("t1", "desk_trade", {"symbol": "A", "qty": 1})
DONE = ToolOutcome({"ok": True, "status": 200, "data": {}}, None, 200, True, 3.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def failed_attempt(
    journal: RequestJournal,
    request: str,
    attempt: str,
    agent: str = "a",
    rewrite: Rewrite | None = None,
) -> None:
    """An attempt that journaled one turn and one answered destructive call, then failed."""
    running = await journal.begin(agent, request, attempt, rewrite)
    running.model_replied({"turn": 1})
    running.before_execution(side_effects=True)
    key = call_key(TRADE, CALL)
    try:
        await running.sending(key)
    except OSError:
        await running.end(succeeded=False)
        raise
    running.answered(key, DONE)
    await running.end(succeeded=False)


def test_the_digest_ignores_key_order_but_not_the_agent() -> None:
    reordered = {"messages": BODY["messages"], "model": "gpt-4o"}
    assert request_digest("a", BODY) == request_digest("a", reordered)
    assert request_digest("a", BODY) != request_digest("b", BODY)


def test_digests_keep_their_value_across_versions() -> None:
    """Identities name journals on disk (and continuity keys, approvals' argument digests): a
    retry after an upgrade must find its journal. Each part is followed by a NUL byte."""
    assert digest() == hashlib.sha256(b"").hexdigest()
    assert digest("", "é") == hashlib.sha256("\x00é\x00".encode()).hexdigest()
    assert request_digest("a", BODY) == (
        "b4c6a255bafb753e47beabfc5c7767dc6d7c215f855d8c5629ec8c967ab80743"
    )


async def test_a_failed_attempt_is_resumed_with_its_turns_and_results(tmp_path: Path) -> None:
    journal = RequestJournal(tmp_path, window_ms=60000)
    request = request_digest("a", BODY)
    await failed_attempt(journal, request, "req_1")
    resumed = await journal.begin("a", request, "req_2")
    assert resumed.resumed_from == "req_1"
    assert resumed.replayed_turn() == {"turn": 1}
    assert resumed.replayed_turn() is None
    assert resumed.known_outcome(call_key(TRADE, CALL)) == DONE
    await resumed.end(succeeded=True)
    assert not journal.holds("a", request)  # a successful attempt is never replayed
    fresh = await journal.begin("a", request, "req_3")
    assert fresh.resumed_from is None
    await fresh.end(succeeded=True)


async def test_an_attempt_that_ran_nothing_leaves_nothing(tmp_path: Path) -> None:
    journal = RequestJournal(tmp_path, window_ms=60000)
    request = request_digest("a", BODY)
    attempt = await journal.begin("a", request, "req_1")
    attempt.model_replied({"turn": 1})
    await attempt.end(succeeded=False)
    assert not journal.holds("a", request)
    assert (await journal.begin("a", request, "req_2")).resumed_from is None


async def test_a_torn_last_line_is_a_call_not_answered(tmp_path: Path) -> None:
    journal = RequestJournal(tmp_path, window_ms=60000)
    request = request_digest("a", BODY)
    await failed_attempt(journal, request, "req_1")
    (segment,) = (tmp_path / "journal" / "log").iterdir()
    with open(segment, "ab") as file:
        file.write(b'{"result": "other", "outco')  # killed mid-write
    resumed = await journal.begin("a", request, "req_2")
    assert resumed.known_outcome(call_key(TRADE, CALL)) == DONE
    assert resumed.known_outcome("other") is None


async def test_journals_older_than_the_window_are_pruned(tmp_path: Path) -> None:
    clock = Clock()
    journal = RequestJournal(tmp_path, window_ms=1000, clock=clock)
    old, recent = request_digest("a", BODY), request_digest("b", BODY)
    await failed_attempt(journal, old, "req_1")
    clock.now += 5
    await failed_attempt(journal, recent, "req_2")
    clock.now += 0.5
    attempt = await journal.begin("a", old, "req_3")
    assert attempt.resumed_from is None  # beyond the window: a new request
    assert not journal.holds("a", old)
    assert journal.holds("a", recent)


async def test_each_agent_has_its_own_quota_and_nothing_in_the_window_goes_for_room(
    tmp_path: Path,
) -> None:
    """Another agent's failures cannot push a journal out (the bound once was pod-wide and
    evicted the oldest): an agent over its own share gets its new journals refused."""
    clock = Clock()
    journal = RequestJournal(tmp_path, window_ms=60000, agents=2, max_journals=6, clock=clock)
    victim = request_digest("victim", BODY)
    await failed_attempt(journal, victim, "req_v", agent="victim")
    for n in range(3):
        await failed_attempt(journal, request_digest(str(n), BODY), f"req_{n}", agent="flood")
    with pytest.raises(JournalQuotaReached):
        await failed_attempt(journal, request_digest("4", BODY), "req_4", agent="flood")
    clock.now += 10  # within the window; the next begin prunes
    assert journal.holds("victim", victim)
    resumed = await journal.begin("victim", victim, "req_v2")
    assert resumed.known_outcome(call_key(TRADE, CALL)) == DONE
    await resumed.end(succeeded=True)
    # A journal that goes (a success) gives its place back.
    again = await journal.begin("flood", request_digest("0", BODY), "req_0b")
    await again.end(succeeded=True)
    await failed_attempt(journal, request_digest("5", BODY), "req_5", agent="flood")


async def test_a_request_that_only_reads_writes_nothing(tmp_path: Path) -> None:
    journal = RequestJournal(tmp_path, window_ms=60000)
    request = request_digest("a", BODY)
    attempt = await journal.begin("a", request, "req_1")
    attempt.model_replied({"turn": 1})
    attempt.before_execution(side_effects=False)
    attempt.answered("read", DONE)
    assert not journal.holds("a", request)
    # The first call with side effects writes every turn that led to it.
    attempt.model_replied({"turn": 2})
    attempt.before_execution(side_effects=True)
    await attempt.sending("trade")
    await attempt.end(succeeded=False)
    resumed = await journal.begin("a", request, "req_2")
    assert [resumed.replayed_turn(), resumed.replayed_turn()] == [{"turn": 1}, {"turn": 2}]


async def test_a_rewritten_retry_takes_the_journal_over_once(tmp_path: Path) -> None:
    """The adopting request's journal holds the failed attempt's records: if it fails too, its
    own retry still knows the order; the original journal and its link are gone."""
    journal = RequestJournal(tmp_path, window_ms=60000)
    first, rewritten = request_digest("a", BODY), request_digest("b", BODY)
    await failed_attempt(journal, first, "req_1", rewrite=Rewrite.known("h", "buy one"))
    other = await journal.begin("a", rewritten, "req_x", rewrite=Rewrite.known("h", "sell two"))
    assert other.resumed_from is None  # its trailing user content is not the failed one's
    await other.end(succeeded=True)
    adopting = await journal.begin("a", rewritten, "req_2", rewrite=Rewrite.known("h", "buy one"))
    assert adopting.resumed_from == "req_1" and adopting.lineage == "req_1"
    assert adopting.replayed_turn() == {"turn": 1}
    await adopting.end(succeeded=False)
    assert not journal.holds("a", first)
    retry = await journal.begin("a", rewritten, "req_3")
    assert retry.known_outcome(call_key(TRADE, CALL)) == DONE and retry.lineage == "req_1"
    await retry.end(succeeded=True)
    assert not journal.log.journals
    # The link the second failure left names a journal that is gone: it adopts nothing.
    late = await journal.begin(
        "a", request_digest("c", BODY), "req_4", rewrite=Rewrite.known("h", "buy one")
    )
    assert late.resumed_from is None


async def test_a_request_with_no_journal_begins_without_reading_the_disk(tmp_path: Path) -> None:
    """The common request (nothing failed) costs no read and no thread hop: the log's index is
    in memory; a request that has a journal reads it (and resumes)."""
    clock = Clock()
    journal = RequestJournal(tmp_path, window_ms=60000, clock=clock)
    reads: list[str] = []
    read = journal.log.read

    def counted(key: tuple[str, str], segments: list[int]) -> object:
        reads.append(key[1])
        return read(key, segments)

    journal.log.read = counted  # type: ignore[method-assign]
    first, second = request_digest("a", BODY), request_digest("a", {"other": 1})
    await (await journal.begin("a", first, "req_1")).end(succeeded=True)
    await (await journal.begin("a", second, "req_2")).end(succeeded=True)
    assert reads == []
    await failed_attempt(journal, first, "req_3")
    resumed = await journal.begin("a", first, "req_4")
    assert resumed.resumed_from == "req_3"
    await resumed.end(succeeded=True)
    assert reads == [first]  # the resumption read what the failed attempt left
    await (await journal.begin("a", first, "req_5")).end(succeeded=True)
    assert reads == [first]  # the resumed journal went with its success
    clock.now += 6.0  # a tenth of the window: pruning is due; it reads nothing either
    await (await journal.begin("a", second, "req_6")).end(succeeded=True)
    assert reads == [first]


async def test_a_retry_resumes_only_the_last_journal_of_its_request(tmp_path: Path) -> None:
    """One log holds every journal: the records of earlier attempts of the same request that
    succeeded (or ran nothing, or aged out) are not part of the one a retry resumes."""
    clock = Clock()
    journal = RequestJournal(tmp_path, window_ms=1000, clock=clock)
    request = request_digest("a", BODY)
    for n in range(3):  # identical requests that succeeded
        done = await journal.begin("a", request, f"req_ok{n}")
        done.model_replied({"turn": n})
        done.before_execution(side_effects=True)
        await done.sending(f"call{n}")
        await done.end(succeeded=True)
    idle = await journal.begin("a", request, "req_idle")  # journaled a turn, ran nothing
    idle.model_replied({"turn": "idle"})
    idle.before_execution(side_effects=True)
    await idle.flush()
    await idle.end(succeeded=False)
    await failed_attempt(journal, request, "req_old")
    clock.now += 5  # beyond the window
    await failed_attempt(journal, request, "req_1")
    resumed = await journal.begin("a", request, "req_2")
    assert resumed.resumed_from == "req_1" and resumed.lineage == "req_1"
    assert [resumed.replayed_turn(), resumed.replayed_turn()] == [{"turn": 1}, None]
    assert resumed.known_outcome("call0") is None
    await resumed.end(succeeded=False)
    restarted = RequestJournal(tmp_path, window_ms=1000, clock=clock)
    again = await restarted.begin("a", request, "req_3")
    assert again.lineage == "req_1"
    assert [again.replayed_turn(), again.replayed_turn()] == [{"turn": 1}, None]


async def test_identical_requests_take_turns_one_woken_at_a_time(tmp_path: Path) -> None:
    """Identical requests run one at a time in the order they came; the end of one wakes the
    next alone (not every waiter, to find all but one still have to wait), and a waiter whose
    client left, before or as its turn came, passes it on."""
    journal = RequestJournal(tmp_path, window_ms=60000)
    request = request_digest("a", BODY)
    first = await journal.begin("a", request, "req_1")
    began: list[str] = []

    async def waiter(attempt: str) -> None:
        running = await journal.begin("a", request, attempt)
        began.append(attempt)
        if attempt != "req_4":
            await asyncio.sleep(0)  # still running while the others wait
        await running.end(succeeded=True)

    gone = asyncio.create_task(waiter("req_gone"))
    second, third = asyncio.create_task(waiter("req_2")), asyncio.create_task(waiter("req_3"))
    late = asyncio.create_task(waiter("req_late"))
    fourth = asyncio.create_task(waiter("req_4"))
    await asyncio.sleep(0)
    gone.cancel()  # before its turn
    await first.end(succeeded=True)  # hands the turn to req_2 ...
    second.cancel()  # ... whose client leaves before it runs: req_3 has it
    late.cancel()  # still waiting
    await asyncio.gather(third, fourth)
    assert began == ["req_3", "req_4"]
    assert gone.cancelled() and second.cancelled() and late.cancelled()
    assert not journal._running
