"""The request journal on its own: what it keeps, for how long, and what a torn or full disk
does to it (SPEC §8.2)."""

from __future__ import annotations

import os
from pathlib import Path

from clawpod.sidecar.mediation.journal import RequestJournal, call_key, request_digest
from clawpod.sidecar.model.conversation import ToolCall
from clawpod.sidecar.model.outcome import ToolOutcome
from tests.mediation.scripted import TRADE

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Buy."}]}
CALL = ToolCall("t1", "desk_trade", {"symbol": "A", "qty": 1})
DONE = ToolOutcome({"ok": True, "status": 200, "data": {}}, None, 200, True, 3.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def failed_attempt(journal: RequestJournal, request: str, attempt: str) -> None:
    """An attempt that journaled one turn and one answered destructive call, then failed."""
    running = await journal.begin(request, attempt)
    running.model_replied({"turn": 1})
    running.before_execution(side_effects=True)
    key = call_key(TRADE, CALL)
    await running.sending(key)
    running.answered(key, DONE)
    await running.end(succeeded=False)


def test_the_digest_ignores_key_order_but_not_the_agent() -> None:
    reordered = {"messages": BODY["messages"], "model": "gpt-4o"}
    assert request_digest("a", BODY) == request_digest("a", reordered)
    assert request_digest("a", BODY) != request_digest("b", BODY)


async def test_a_failed_attempt_is_resumed_with_its_turns_and_results(tmp_path: Path) -> None:
    journal = RequestJournal(tmp_path, window_ms=60000)
    request = request_digest("a", BODY)
    await failed_attempt(journal, request, "req_1")
    resumed = await journal.begin(request, "req_2")
    assert resumed.resumed_from == "req_1"
    assert resumed.replayed_turn() == {"turn": 1}
    assert resumed.replayed_turn() is None
    assert resumed.known_outcome(call_key(TRADE, CALL)) == DONE
    await resumed.end(succeeded=True)
    assert not journal.path(request).exists()  # a successful attempt is never replayed
    fresh = await journal.begin(request, "req_3")
    assert fresh.resumed_from is None
    await fresh.end(succeeded=True)


async def test_an_attempt_that_ran_nothing_leaves_nothing(tmp_path: Path) -> None:
    journal = RequestJournal(tmp_path, window_ms=60000)
    request = request_digest("a", BODY)
    attempt = await journal.begin(request, "req_1")
    attempt.model_replied({"turn": 1})
    await attempt.end(succeeded=False)
    assert not journal.path(request).exists()
    assert (await journal.begin(request, "req_2")).resumed_from is None


async def test_a_torn_last_line_is_a_call_not_answered(tmp_path: Path) -> None:
    journal = RequestJournal(tmp_path, window_ms=60000)
    request = request_digest("a", BODY)
    await failed_attempt(journal, request, "req_1")
    with open(journal.path(request), "ab") as file:
        file.write(b'{"result": "other", "outco')  # killed mid-write
    resumed = await journal.begin(request, "req_2")
    assert resumed.known_outcome(call_key(TRADE, CALL)) == DONE
    assert resumed.known_outcome("other") is None


async def test_journals_older_than_the_window_are_pruned(tmp_path: Path) -> None:
    clock = Clock()
    journal = RequestJournal(tmp_path, window_ms=1000, clock=clock)
    old, recent = request_digest("a", BODY), request_digest("b", BODY)
    await failed_attempt(journal, old, "req_1")
    os.utime(journal.path(old), (clock.now - 5, clock.now - 5))
    await failed_attempt(journal, recent, "req_2")
    os.utime(journal.path(recent), (clock.now, clock.now))
    clock.now += 0.5
    attempt = await journal.begin(old, "req_3")
    assert attempt.resumed_from is None  # beyond the window: a new request
    assert not journal.path(old).exists()
    assert journal.path(recent).exists()


async def test_the_number_of_journals_is_bounded(tmp_path: Path) -> None:
    clock = Clock()
    journal = RequestJournal(tmp_path, window_ms=60000, max_journals=3, clock=clock)
    requests = [request_digest(str(n), BODY) for n in range(5)]
    for age, request in enumerate(reversed(requests)):
        await failed_attempt(journal, request, f"req_{age}")
        os.utime(journal.path(request), (clock.now - age, clock.now - age))
    clock.now += 10  # within the window; the next begin prunes
    await (await journal.begin(request_digest("x", BODY), "req_x")).end(succeeded=True)
    assert sorted(p.name for p in journal.directory.iterdir()) == sorted(
        journal.path(r).name for r in requests[2:]
    )


async def test_a_request_that_only_reads_writes_nothing(tmp_path: Path) -> None:
    journal = RequestJournal(tmp_path, window_ms=60000)
    request = request_digest("a", BODY)
    attempt = await journal.begin(request, "req_1")
    attempt.model_replied({"turn": 1})
    attempt.before_execution(side_effects=False)
    attempt.answered("read", DONE)
    assert not journal.path(request).exists()
    # The first call with side effects writes every turn that led to it.
    attempt.model_replied({"turn": 2})
    attempt.before_execution(side_effects=True)
    await attempt.sending("trade")
    await attempt.end(succeeded=False)
    resumed = await journal.begin(request, "req_2")
    assert [resumed.replayed_turn(), resumed.replayed_turn()] == [{"turn": 1}, {"turn": 2}]
