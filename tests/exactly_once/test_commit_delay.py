"""The journal's commit delay (PostgreSQL's commit_delay): a batch that syncs waits a bounded
moment for other requests with journal work under way, so one ``fdatasync`` and one wake-up of
the writer thread serve more of them. Attacks: a request alone, a flood, a failed sync, a
crash while a batch gathers."""

from __future__ import annotations

import asyncio
import errno
import time
from pathlib import Path

import pytest

from clawpod.sidecar.state import journal_log
from clawpod.sidecar.state.journal import RequestJournal, request_digest
from clawpod.sidecar.state.journal_log import JournalLog
from tests.exactly_once.test_journal import DONE
from tests.exactly_once.test_journal_log import WINDOW_MS, CountedSync, body, destructive

# Longer than any test runs: a batch that waited for it would hang the test (the deadlock
# guards below), so a test that passes shows the batch did not wait.
FOREVER_S = 600.0
GUARD_S = 30.0  # a deadlock guard, not a timing assertion


def key(n: int) -> tuple[str, str]:
    return ("agent", f"request{n}")


def records(n: int) -> bytes:
    return journal_log.line(key(n), time.time(), {"sent": f"call{n}"})


class UnderWay:
    """How many requests have journal work under way, as a test says."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self) -> int:
        return self.count


def log_of(tmp_path: Path, in_flight: int | UnderWay, delay_s: float) -> JournalLog:
    return JournalLog(
        tmp_path / "journal",
        window_s=WINDOW_MS / 1000,
        clock=time.time,
        in_flight=in_flight if isinstance(in_flight, UnderWay) else UnderWay(in_flight),
        commit_delay_s=delay_s,
    )


def recovered(tmp_path: Path) -> set[tuple[str, str]]:
    restarted = log_of(tmp_path, 0, 0)
    restarted.recover()
    return set(restarted.journals)


async def test_a_request_alone_is_not_delayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no other request under way, a batch syncs at once, however long the delay."""
    sync = CountedSync()
    monkeypatch.setattr(journal_log, "_sync", sync)
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    journal.log.commit_delay_s = FOREVER_S
    request = request_digest("a", body(0))
    await asyncio.wait_for(destructive(journal, "a", request, "req_0", succeed=True), GUARD_S)
    assert sync.calls == 2


async def test_a_batch_goes_once_every_request_under_way_waits_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three requests under way: the first two wait, the third completes the batch, and the
    three share one sync without waiting out the delay."""
    sync = CountedSync()
    monkeypatch.setattr(journal_log, "_sync", sync)
    log = log_of(tmp_path, 3, FOREVER_S)
    first = [asyncio.ensure_future(log.append(key(n), records(n))) for n in range(2)]
    await asyncio.sleep(0.05)
    assert not any(waiter.done() for waiter in first)  # gathering: nothing synced yet
    assert sync.calls == 0
    await asyncio.wait_for(asyncio.gather(*first, log.append(key(2), records(2))), GUARD_S)
    assert sync.calls == 1
    log.close()
    assert recovered(tmp_path) == {key(0), key(1), key(2)}


async def test_a_request_that_ends_lets_the_batch_it_was_awaited_by_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch waits for another request under way; that request ends without journaling
    anything (its round only read): the batch goes at once, not after the delay."""
    sync = CountedSync()
    monkeypatch.setattr(journal_log, "_sync", sync)
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    journal.log.commit_delay_s = FOREVER_S
    reader = await journal.begin("a", request_digest("a", body("reads")), "req_r")
    writing = asyncio.ensure_future(
        destructive(journal, "a", request_digest("a", body("writes")), "req_w", succeed=True)
    )
    await asyncio.sleep(0.05)
    assert not writing.done() and sync.calls == 0  # its ``sent`` waits for the reader
    await reader.end(succeeded=True)
    await asyncio.wait_for(writing, GUARD_S)
    assert sync.calls == 2


async def test_a_flood_does_not_hold_a_batch_past_the_delay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests that keep arriving join the batch that gathers, but do not restart its delay:
    the first waiter's sync goes while the flood goes on, and every later one's too."""
    sync = CountedSync()
    monkeypatch.setattr(journal_log, "_sync", sync)
    log = log_of(tmp_path, 10_000, 0.05)  # always someone else under way
    first = asyncio.ensure_future(log.append(key(0), records(0)))
    flood: list[asyncio.Future[None]] = []
    for n in range(1, 400):
        flood.append(asyncio.ensure_future(log.append(key(n), records(n))))
        await asyncio.sleep(0.005)
        if first.done():
            break
    assert first.done()  # long before the flood ran out
    assert len(flood) < 399
    await asyncio.wait_for(asyncio.gather(*flood), GUARD_S)
    assert 1 <= sync.calls <= len(flood)  # batches kept going, each shared
    log.close()


async def test_a_sync_that_fails_fails_every_request_of_the_delayed_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One fdatasync for three requests: when it fails, none of them learns its records are
    durable (each call stays unsent), and the next batch goes to a new segment."""

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    under_way = UnderWay(1)
    log = log_of(tmp_path, under_way, FOREVER_S)
    await asyncio.wait_for(log.append(key(9), records(9)), GUARD_S)
    under_way.count = 3
    monkeypatch.setattr(journal_log, "_sync", failing)
    batch = [log.append(key(n), records(n)) for n in range(3)]
    outcomes = await asyncio.wait_for(asyncio.gather(*batch, return_exceptions=True), GUARD_S)
    assert all(isinstance(o, OSError) and o.errno == errno.EIO for o in outcomes)
    monkeypatch.undo()
    later = [log.append(key(n), records(n)) for n in range(3, 6)]
    await asyncio.wait_for(asyncio.gather(*later), GUARD_S)
    log.close()
    assert len(list((tmp_path / "journal" / "log").iterdir())) == 2
    assert {key(3), key(4), key(5), key(9)} <= recovered(tmp_path)


async def test_a_crash_while_a_batch_gathers_loses_nothing_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while a batch waits out its delay: what earlier batches acknowledged is found
    after the restart; the waiting requests were never told their records are durable, so
    their calls were not sent (whatever the restart finds of them)."""
    journal = RequestJournal(tmp_path, window_ms=WINDOW_MS)
    acknowledged = [request_digest("a", body(n)) for n in range(4)]
    await asyncio.wait_for(
        asyncio.gather(
            *(
                destructive(journal, "a", r, f"req_{n}", succeed=False)
                for n, r in enumerate(acknowledged)
            )
        ),
        GUARD_S,
    )
    journal.log.commit_delay_s = FOREVER_S
    waiting = [
        await journal.begin("a", request_digest("a", body(f"w{n}")), f"w_{n}") for n in range(3)
    ]
    sending = []
    for attempt in waiting[:2]:  # the third stays under way: the batch gathers
        attempt.before_execution(side_effects=True)
        sending.append(asyncio.ensure_future(attempt.sending("trade")))
    await asyncio.sleep(0.05)
    assert not any(s.done() for s in sending)  # not durable: the calls are not sent
    restarted = RequestJournal(tmp_path, window_ms=WINDOW_MS)  # the first one killed
    for n, request in enumerate(acknowledged):
        resumed = await restarted.begin("a", request, f"retry_{n}")
        assert resumed.resumed_from == f"req_{n}"
        assert resumed.known_outcome("trade") == DONE
        await resumed.end(succeeded=True)
    journal.close()  # what the batch held is written now: its requests learn it
    await asyncio.wait_for(asyncio.gather(*sending), GUARD_S)
