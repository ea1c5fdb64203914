"""The journal's one log (SPEC §8.2): group commit, a full disk between batches, a crash mid-batch,
two agents sharing it, segments that go, and the previous layout after an upgrade."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
from pathlib import Path

import orjson
import pytest

from clawpod.sidecar.state import journal_log
from clawpod.sidecar.state.journal import RequestJournal, Rewrite, request_digest
from tests.exactly_once.test_journal import DONE, Clock

WINDOW_MS = 60000
GUARD_STEPS = 3000  # a deadlock guard, not a timing assertion


def body(n: int | str) -> dict[str, object]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": f"Buy {n}."}]}


async def destructive(
    journal: RequestJournal, agent: str, request: str, attempt: str, *, succeed: bool
) -> None:
    """A round with one call that has side effects, answered, then the attempt's end."""
    running = await journal.begin(agent, request, attempt)
    try:
        running.model_replied({"turn": attempt})
        running.before_execution(side_effects=True)
        await running.sending("trade")
        running.answered("trade", DONE)
        await running.flush()  # before the next model call
    except OSError:
        await running.end(succeeded=False)  # as the driver does
        raise
    await running.end(succeeded=succeed)


async def settled(journal: RequestJournal) -> None:
    """Until no batch is being written (an ``end`` line may still be on its way)."""
    for _ in range(GUARD_STEPS):
        if not journal.log._writing:
            return
        await asyncio.sleep(0.01)


class CountedSync:
    """``fdatasync`` that counts its calls and the threads they ran in."""

    def __init__(self) -> None:
        self.calls = 0
        self.threads: list[threading.Thread] = []

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.threads.append(threading.current_thread())
        os.fdatasync(fd)

    def on_the_loop(self) -> list[bool]:
        return [thread is threading.main_thread() for thread in self.threads]


class FullDisk:
    """``os.pwrite`` that, while ``full``, writes a few bytes and fails (ENOSPC)."""

    def __init__(self) -> None:
        self.full = False

    def __call__(self, fd: int, data: memoryview, offset: int) -> int:
        if self.full:
            os.pwrite(fd, data[:9], offset)
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.pwrite(fd, data, offset)


def segments(state: Path) -> list[str]:
    return sorted(p.name for p in (state / "journal" / "log").iterdir())


async def test_a_destructive_round_syncs_twice_and_concurrent_requests_share_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``sent`` line is synced before the call goes, the result before the next model call
    uses it (SPEC §8.2). Requests running at once wait for one batch, not one sync each."""
    sync = CountedSync()
    monkeypatch.setattr(journal_log, "_sync", sync)
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    await destructive(journal, "a", request_digest("a", body(0)), "req_0", succeed=True)
    await settled(journal)
    assert sync.calls == 2
    sync.calls = 0
    requests = [request_digest("a", body(n)) for n in range(16)]
    await asyncio.gather(
        *(destructive(journal, "a", r, f"req_{n}", succeed=False) for n, r in enumerate(requests))
    )
    assert sync.calls < 32  # group commit: the 15 that queued behind the first share a batch
    assert not any(sync.on_the_loop())  # a slow disk never stalls every agent's requests
    # Each is durable and resumable on its own, after a restart too.
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    for n, request in enumerate(requests):
        resumed = await restarted.begin("a", request, f"retry_{n}")
        assert resumed.resumed_from == f"req_{n}"
        assert resumed.known_outcome("trade") == DONE
        await resumed.end(succeeded=True)


async def test_the_event_loop_never_waits_for_a_sync_however_fast_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync can take milliseconds; on the loop, every agent's requests would wait with it.
    Forty fast syncs in a row still run in the writer thread."""
    sync = CountedSync()
    monkeypatch.setattr(journal_log, "_sync", sync)
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    for n in range(20):
        await destructive(journal, "a", request_digest("a", body(n)), f"req_{n}", succeed=False)
    assert sync.calls >= 40
    assert not any(sync.on_the_loop())


async def test_a_sync_that_fails_refuses_its_batch_and_the_next_goes_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An I/O error in fdatasync: what reached the disk is unknown, so the call is not sent
    and nothing more is appended to that segment."""
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    await destructive(journal, "a", request_digest("a", body(0)), "req_0", succeed=False)

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(journal_log, "_sync", failing)
    with pytest.raises(OSError, match="Input/output"):
        await destructive(journal, "a", request_digest("a", body(1)), "req_1", succeed=False)
    monkeypatch.undo()
    await destructive(journal, "a", request_digest("a", body(2)), "req_2", succeed=False)
    assert len(segments(tmp_path)) == 2
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    for n in (0, 2):
        resumed = await restarted.begin("a", request_digest("a", body(n)), "retry")
        assert resumed.resumed_from == f"req_{n}"


async def test_a_batch_queued_at_shutdown_is_written_by_close(tmp_path: Path) -> None:
    """Shutdown between a request queueing its ``sent`` record and its sync: the record is
    written and synced, and the request learns it (it never waits forever)."""
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    kept, last = request_digest("a", body("kept")), request_digest("a", body("last"))
    await destructive(journal, "a", kept, "req_0", succeed=False)
    attempt = await journal.begin("a", last, "req_1")
    attempt.before_execution(side_effects=True)
    sending = asyncio.ensure_future(attempt.sending("trade"))
    await asyncio.sleep(0)  # queued
    journal.close()
    await asyncio.wait_for(sending, 10)  # a deadlock guard, not a timing assertion
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    resumed = await restarted.begin("a", last, "retry")
    unknown = resumed.known_outcome("trade")  # sent, never answered: not sent again
    assert unknown is not None and unknown.error_code == "outcome_unknown"


async def test_a_call_waits_for_the_threads_sync_and_a_restart_meanwhile_does_not_send_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop writes a batch and the writer thread syncs it: the ``sent`` record is in the
    segment before it is durable, and the call waits until it is. A sidecar restarted while
    the sync is out (the first one killed) finds the record and does not send the call."""
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    request = request_digest("a", body("stuck"))
    await destructive(journal, "a", request_digest("a", body(0)), "req_0", succeed=False)
    disk_answers = threading.Event()

    def stuck(fd: int) -> None:
        disk_answers.wait(60)  # a deadlock guard, not a timing assertion
        os.fdatasync(fd)

    monkeypatch.setattr(journal_log, "_sync", stuck)
    attempt = await journal.begin("a", request, "req_1")
    attempt.before_execution(side_effects=True)
    sending = asyncio.ensure_future(attempt.sending("trade"))
    for _ in range(GUARD_STEPS):  # until the loop has handed the batch to the thread
        if journal.log._writing:
            break
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.01)
    assert not sending.done()  # not durable yet: the call is not sent
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    resumed = await restarted.begin("a", request, "req_2")
    unknown = resumed.known_outcome("trade")
    assert unknown is not None and unknown.error_code == "outcome_unknown"
    disk_answers.set()
    await asyncio.wait_for(sending, 60)  # a deadlock guard, not a timing assertion


async def test_a_full_disk_refuses_the_batch_and_the_log_goes_on_in_a_new_segment(
    tmp_path: Path,
) -> None:
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    disk = FullDisk()
    journal.log.write = disk
    before, refused, after = (request_digest("a", body(n)) for n in ("before", "no", "after"))
    await destructive(journal, "a", before, "req_1", succeed=False)
    disk.full = True
    attempt = await journal.begin("a", refused, "req_2")
    attempt.before_execution(side_effects=True)
    with pytest.raises(OSError, match="No space left"):
        await attempt.sending("trade")  # the driver then does not send the call
    await attempt.end(succeeded=False)
    disk.full = False
    await destructive(journal, "a", after, "req_3", succeed=False)
    # Nothing was appended after the torn bytes: the next batch went to a new segment.
    assert len(segments(tmp_path)) == 2
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    for request, attempt_id in ((before, "req_1"), (after, "req_3")):
        resumed = await restarted.begin("a", request, "retry")
        assert resumed.resumed_from == attempt_id
        assert resumed.known_outcome("trade") == DONE
    assert (await restarted.begin("a", refused, "retry")).resumed_from is None


async def test_a_crash_in_the_middle_of_a_batch_loses_only_its_torn_line(
    tmp_path: Path,
) -> None:
    """Killed while a batch was written: its complete lines count, its torn one does not, and
    the restarted sidecar appends to a new segment rather than after the torn bytes."""
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    first, second = request_digest("a", body(1)), request_digest("a", body(2))
    await destructive(journal, "a", first, "req_1", succeed=False)
    (segment,) = (tmp_path / "journal" / "log").iterdir()
    torn = journal_log.line(("x" * 32, second), 0.0, {"sent": "trade"})
    with open(segment, "ab") as file:
        file.write(torn[:20])
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    resumed = await restarted.begin("a", first, "req_2")
    assert resumed.known_outcome("trade") == DONE
    await resumed.end(succeeded=False)
    await destructive(restarted, "a", second, "req_3", succeed=False)
    assert len(segments(tmp_path)) == 2
    again = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    assert (await again.begin("a", second, "req_4")).resumed_from == "req_3"
    assert (await again.begin("a", first, "req_5")).known_outcome("trade") == DONE


async def test_a_resumed_journal_reads_its_own_records_not_the_segments_around_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a resumed request read and split every segment its journal had records in (up
    to 4 MiB each); now it reads the bytes of its own records, after a restart too."""
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    wanted = request_digest("a", body("wanted"))
    await destructive(journal, "a", wanted, "req_w", succeed=False)
    for n in range(50):  # other journals' records around it
        await destructive(journal, "a", request_digest("a", body(n)), f"req_{n}", succeed=False)
    read: list[int] = []
    pread = os.pread

    def counted_pread(fd: int, length: int, offset: int) -> bytes:
        read.append(length)
        return pread(fd, length, offset)

    monkeypatch.setattr(journal_log.os, "pread", counted_pread)
    for resuming in (journal, RequestJournal(tmp_path, window_ms=WINDOW_MS)):
        await resuming.log.recovered()
        read.clear()
        own = sum(span[2] for span in resuming.log.journals[(resuming.folder("a"), wanted)].spans)
        resumed = await resuming.begin("a", wanted, "retry")
        assert resumed.resumed_from == "req_w"
        assert resumed.known_outcome("trade") == DONE
        assert resumed.replayed_turn() == {"turn": "req_w"}
        assert 0 < sum(read) == own
        await resumed.end(succeeded=False)


async def test_two_agents_share_the_log_and_never_each_others_journals(tmp_path: Path) -> None:
    """The same request identity under two agents names two journals; one agent's flood of
    failures fills its own quota, never the other's, and pushes nothing out."""
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS, agents=2, max_journals=8)
    shared = request_digest("same", body(0))
    await destructive(journal, "victim", shared, "req_v", succeed=False)
    for n in range(4):
        await destructive(journal, "flood", request_digest("f", body(n)), f"f{n}", succeed=False)
    with pytest.raises(OSError):
        await destructive(journal, "flood", shared, "req_f", succeed=False)
    fresh = await journal.begin("flood", shared, "req_f2")
    assert fresh.resumed_from is None  # the victim's journal is not the flood's
    await fresh.end(succeeded=True)
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS, agents=2, max_journals=8)
    resumed = await restarted.begin("victim", shared, "req_v2")
    assert resumed.resumed_from == "req_v"
    assert (await restarted.begin("flood", shared, "req_f3")).resumed_from is None


async def test_segments_go_once_nothing_needs_them_and_dropped_journals_stay_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment whose ``end`` lines drop journals of an older segment that stays (another
    journal in it is still in the window) is kept: else a restart would bring them back."""
    monkeypatch.setattr(journal_log, "MAX_SEGMENT_BYTES", 1)  # every batch in a new segment
    clock = Clock()
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS, clock=clock)
    dropped, kept = request_digest("a", body("dropped")), request_digest("a", body("kept"))
    await destructive(journal, "a", dropped, "req_1", succeed=False)
    await destructive(journal, "a", kept, "req_2", succeed=False)
    for n in range(3):
        await destructive(journal, "a", request_digest("a", body(n)), f"ok{n}", succeed=True)
    resumed = await journal.begin("a", dropped, "req_3")
    assert resumed.resumed_from == "req_1"
    await resumed.end(succeeded=True)  # its end line lands in a newer segment
    await destructive(journal, "a", request_digest("a", body("last")), "ok", succeed=True)
    written = segments(tmp_path)
    clock.now += 10  # pruning is due
    await (await journal.begin("a", request_digest("a", body("x")), "req_4")).end(succeeded=True)
    left = segments(tmp_path)
    assert len(left) < len(written)  # the successes' segments went
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS, clock=clock)
    for request, resumed_from in ((dropped, None), (kept, "req_2")):
        attempt = await restarted.begin("a", request, "req_5")
        assert attempt.resumed_from == resumed_from
        await attempt.end(succeeded=False)
    clock.now += WINDOW_MS / 1000 + 1  # everything ages out; its segments go too
    await (await restarted.begin("a", request_digest("a", body("y")), "req_7")).end(succeeded=True)
    assert len(segments(tmp_path)) <= 1  # at most the one appended to


def legacy_journal(state: Path, journal: RequestJournal, agent: str, request: str) -> Path:
    """A failed attempt as the file-per-request layout (before 2026-11-26) left it."""
    folder = state / "journal" / journal.folder(agent)
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        {"attempt": "req_old", "origin": "req_old"},
        {"turn": {"turn": 1}},
        {"sent": "trade"},
        {"result": "trade", "outcome": DONE},
        {"sent": "other"},
    ]
    path = folder / f"{request}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines) + b'{"resu')
    return path


async def test_a_journal_of_the_previous_layout_is_resumed_after_an_upgrade(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS, clock=clock)
    request, rewritten = request_digest("a", body(1)), request_digest("a", body(2))
    old = request_digest("a", body("old"))
    legacy_journal(tmp_path, journal, "a", request)
    link = tmp_path / "journal" / journal.folder("a") / "history.link"
    link.write_bytes(orjson.dumps({"request": request, "asked": "buy one"}))
    aged = legacy_journal(tmp_path, journal, "a", old)
    os.utime(aged, (clock.now - 3600, clock.now - 3600))
    with caplog.at_level(logging.WARNING, logger=journal_log.__name__):
        adopting = await journal.begin(
            "a", rewritten, "req_new", Rewrite.known("history", "buy one")
        )
    assert "previous layout" in caplog.text
    assert not any(p.is_dir() and p.name != "log" for p in (tmp_path / "journal").iterdir())
    # The link was moved too: a rewritten retry adopts the old journal.
    assert adopting.resumed_from == "req_old" and adopting.lineage == "req_old"
    assert adopting.replayed_turn() == {"turn": 1}
    assert adopting.known_outcome("trade") == DONE
    unknown = adopting.known_outcome("other")  # sent, never answered: not sent again
    assert unknown is not None and unknown.error_code == "outcome_unknown"
    await adopting.end(succeeded=False)
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS, clock=clock)
    assert (await restarted.begin("a", rewritten, "req_2")).lineage == "req_old"
    assert (await restarted.begin("a", old, "req_3")).resumed_from is None  # aged: deleted


async def test_a_closed_journal_refuses_writes_and_leaves_no_writer_behind(tmp_path: Path) -> None:
    """At shutdown the writer thread ends after its last batch; a call that would still be
    journaled then is refused (not sent), never left waiting."""
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    kept, late = request_digest("a", body("kept")), request_digest("a", body("late"))
    await destructive(journal, "a", kept, "req_1", succeed=False)
    writer = journal.log._writer
    journal.close()
    assert writer is not None and not writer.is_alive()
    with pytest.raises(OSError, match="closed"):
        await destructive(journal, "a", late, "req_2", succeed=False)
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    assert (await restarted.begin("a", kept, "req_3")).resumed_from == "req_1"
    assert (await restarted.begin("a", late, "req_4")).resumed_from is None


async def test_what_a_succeeded_journal_held_is_blanked_at_once(tmp_path: Path) -> None:
    """A credential a model put into a call's arguments was kept no longer than the request's
    journal file; in the log, the records of a journal that goes are blanked as it goes (a
    failed attempt's stay for its retry, as before)."""
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    secret = "sk-model-sent-this-credential"
    succeeded, failed = request_digest("a", body("ok")), request_digest("a", body("failed"))
    for request, attempt, succeed in ((succeeded, "req_1", True), (failed, "req_2", False)):
        running = await journal.begin("a", request, attempt)
        running.model_replied({"turn": f"{attempt} {secret}"})
        running.before_execution(side_effects=True)
        await running.sending("trade")
        await running.end(succeeded=succeed)
    await settled(journal)
    (segment,) = (tmp_path / "journal" / "log").iterdir()
    assert segment.read_bytes().count(secret.encode()) == 1  # the failed attempt's only
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    resumed = await restarted.begin("a", failed, "req_3")
    assert resumed.replayed_turn() == {"turn": f"req_2 {secret}"}
    await resumed.end(succeeded=True)  # after a restart too
    await settled(restarted)
    assert secret.encode() not in segment.read_bytes()
    assert (await restarted.begin("a", succeeded, "req_4")).resumed_from is None


async def test_files_of_the_previous_layout_beside_the_log_are_moved_into_a_new_segment(
    tmp_path: Path,
) -> None:
    """A log and files of the previous layout at once (a downgrade, then an upgrade again): the
    files go into a segment after the log's, and both are resumed."""
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    in_log, in_file = request_digest("a", body("log")), request_digest("a", body("file"))
    await destructive(journal, "a", in_log, "req_log", succeed=False)
    journal.close()
    upgraded = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    legacy_journal(tmp_path, upgraded, "a", in_file)
    assert (await upgraded.begin("a", in_log, "req_1")).resumed_from == "req_log"
    assert (await upgraded.begin("a", in_file, "req_2")).resumed_from == "req_old"
    assert len(segments(tmp_path)) == 2


async def test_a_log_that_could_not_be_recovered_is_appended_to_past_its_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery failed (an unreadable log resumes nothing): new records still find a segment
    of their own instead of failing on the first number forever."""
    (tmp_path / "journal" / "log").mkdir(parents=True)
    (tmp_path / "journal" / "log" / "000000000001.jsonl").write_bytes(b"")
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)

    def unreadable() -> None:
        raise PermissionError("unreadable")

    monkeypatch.setattr(journal.log, "recover", unreadable)
    await destructive(journal, "a", request_digest("a", body(1)), "req_1", succeed=False)
    assert segments(tmp_path) == ["000000000001.jsonl", "000000000002.jsonl"]


async def test_a_succeeded_request_blanks_its_records_with_its_end_line_in_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request alone writes three times: its ``sent`` batch, its result, and its ``end`` line
    with the spaces over its records before it (they touch), not a write for each record. What
    it held is gone all the same, and a retry runs afresh."""
    writes: list[int] = []
    pwrite = os.pwrite

    def counted(fd: int, data: bytes | memoryview, offset: int) -> int:
        writes.append(offset)
        return pwrite(fd, data, offset)

    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    journal.log.write = counted
    monkeypatch.setattr(journal_log.os, "pwrite", counted)
    secret = "sk-model-sent-this-credential"
    request = request_digest("a", body("once"))
    await destructive(journal, "a", request_digest("a", body(0)), "req_0", succeed=False)
    writes.clear()
    running = await journal.begin("a", request, "req_1")
    running.model_replied({"turn": secret})
    running.before_execution(side_effects=True)
    await running.sending("trade")
    running.answered("trade", DONE)
    await running.flush()
    await running.end(succeeded=True)
    await settled(journal)
    assert len(writes) == 3
    monkeypatch.undo()
    (segment,) = (tmp_path / "journal" / "log").iterdir()
    assert secret.encode() not in segment.read_bytes()
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    assert (await restarted.begin("a", request, "req_2")).resumed_from is None
    resumed = await restarted.begin("a", request_digest("a", body(0)), "retry")
    assert resumed.known_outcome("trade") == DONE  # the record before it is untouched
