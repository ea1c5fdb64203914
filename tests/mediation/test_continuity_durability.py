"""Issue 14 findings 5 and 6 (contract §8.3): state writes that fail never cost an
answer nor corrupt the store, torn lines never hide the next entry, compaction never blocks
requests, and one agent cannot evict another's rounds."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clawpod.sidecar.state import continuity
from clawpod.sidecar.state.continuity import ContinuityStore, StateWriteFailed
from tests.mediation.conftest import MediatedPod, PodFactory
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.upstream import Reply

GUARD_S = 30  # a deadlock guard for a blocked worker, not a timing assertion


def rounds(tag: str, size: int = 100) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": tag + "x" * size}]


class FlakyWrite:
    """``os.write`` that writes at most ``chunk`` bytes a call and fails on chosen calls."""

    def __init__(self, chunk: int = 7) -> None:
        self.chunk = chunk
        self.failing = False

    def __call__(self, fd: int, data: memoryview) -> int:
        if self.failing:
            # Like a full disk: part of the data got in before the error.
            os.write(fd, data[: self.chunk])
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data[: self.chunk])


def test_short_writes_are_continued_and_a_failure_leaves_the_store_consistent(
    tmp_path: Path,
) -> None:
    write = FlakyWrite()
    store = ContinuityStore(tmp_path, write=write)
    store.remember("k1", rounds("one"), agent="a")
    write.failing = True
    with pytest.raises(StateWriteFailed, match="No space left"):
        store.remember("k2", rounds("two"), agent="a")
    with pytest.raises(StateWriteFailed):
        store.remember("k1", rounds("replaced"), agent="a")  # the old entry stays
    write.failing = False
    store.remember("k3", rounds("three"), agent="a")
    expected = {"k1": rounds("one"), "k3": rounds("three")}
    assert store.recall(["k1", "k2", "k3"]) == expected
    # After a restart too: the torn lines are skipped, the entry after them is not.
    assert ContinuityStore(tmp_path).recall(["k1", "k2", "k3"]) == expected


def test_a_torn_line_that_runs_into_the_next_entry_does_not_hide_it(tmp_path: Path) -> None:
    """What an older writer left after a failed write: no newline before the next entry."""
    store = ContinuityStore(tmp_path)
    store.remember("k1", rounds("one"), agent="a")
    with open(store.path, "ab") as log:
        log.write(b'{"key": "k2", "agent": "a", "messa')
        log.write(b'{"key":"k3","agent":"a","messages":[{"role":"assistant","content":"3"}]}\n')
    restarted = ContinuityStore(tmp_path)
    assert restarted.recall(["k1", "k2", "k3"]) == {
        "k1": rounds("one"),
        "k3": [{"role": "assistant", "content": "3"}],
    }


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB filesystem (needs root to mount)."""
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs: {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_never_corrupts_the_store(small_disk: Path) -> None:
    filler = small_disk / "continuity" / "filler"
    filler.parent.mkdir()
    filler.write_bytes(b"\0" * 600_000)
    store = ContinuityStore(small_disk)
    stored: dict[str, list[dict[str, Any]]] = {}
    failures = 0
    for number in range(20):
        key, messages = f"k{number:02d}", rounds(f"{number:02d}", 50_000 + 997 * number)
        try:
            store.remember(key, messages, agent="a")
        except StateWriteFailed:
            failures += 1
        else:
            stored[key] = messages
    assert failures and stored
    keys = [f"k{n:02d}" for n in range(20)]
    assert store.recall(keys) == stored
    filler.unlink()  # room again: the next entry is stored whole, also across a restart
    store.remember("after", rounds("after"), agent="a")
    assert ContinuityStore(small_disk).recall([*keys, "after"]) == stored | {
        "after": rounds("after")
    }


async def test_a_full_state_disk_never_turns_a_finished_answer_into_an_error(
    make_pod: PodFactory, tmp_path: Path
) -> None:
    continuity_dir = tmp_path / "state0" / "continuity"  # make_pod's first state dir
    continuity_dir.mkdir(parents=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(continuity_dir)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {result.stderr.strip()}")
    try:
        (continuity_dir / "filler").write_bytes(b"\0" * (64 * 1024 - 4096))
        with pytest.raises(OSError):  # now full
            (continuity_dir / "more").write_bytes(b"\0" * 8192)
        await _answer_survives_a_failed_state_write(await make_pod())
    finally:
        subprocess.run(["umount", "-l", str(continuity_dir)], check=False)


async def _answer_survives_a_failed_state_write(pod: MediatedPod) -> None:
    trade = {"symbol": "AAPL", "quantity": 1, "side": "buy"}
    pod.upstream.enqueue(
        "openai", Reply.json(oa_calls(("c1", "desk_trade", trade))), Reply.json(oa_text("done"))
    )
    answer = await pod.openai().chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "buy one"}]
    )
    assert answer.choices[0].message.content.startswith("done")
    assert len(pod.service.requests) == 1  # the destructive call ran once
    records = await pod.wait_for_audit(2)
    failed = [r for r in records if r.get("event") == "state_write_failed"]
    assert failed and failed[0]["store"] == "continuity"
    request = [r for r in records if r.get("route")][-1]
    assert request["http_status"] == 200 and failed[0]["request"] == request["id"]
    metrics = pod.sidecar.state.metrics.render()[0].decode()
    assert 'claw_state_write_failures_total{store="continuity"} 1.0' in metrics


def test_compaction_runs_beside_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    release = threading.Event()
    copy = continuity.copy_entries

    def instrumented(*args: Any) -> dict[str, int]:
        if threading.current_thread() is threading.main_thread():
            events.append("compaction ran on the request's thread")
        else:
            events.append("compaction started")
            release.wait(GUARD_S)
            events.append("compaction copied")
        return copy(*args)

    monkeypatch.setattr(continuity, "copy_entries", instrumented)
    store = ContinuityStore(tmp_path, max_entries=3)
    payload = rounds("p", 4096)
    number = 0
    while not events:
        store.remember(f"{number:04x}", payload, agent="a")
        number += 1
    for extra in range(number, number + 50):  # requests go on while the copy is held
        store.remember(f"{extra:04x}", payload, agent="a")
        assert store.recall([f"{extra:04x}"])
    events.append("requests served")
    release.set()
    store.finish_compaction()
    assert events == ["compaction started", "requests served", "compaction copied"]
    last = [f"{n:04x}" for n in range(number + 47, number + 50)]
    assert set(store.recall(last)) == set(last)
    assert store.path.stat().st_size < 512 * 1024  # the compacted log is in place
    assert set(ContinuityStore(tmp_path, max_entries=3).recall(last)) == set(last)


def test_one_agent_cannot_evict_another_agents_rounds(tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path, max_entries=100, max_bytes=2_000_000, agents=2)
    store.remember("quiet-1", rounds("q1"), agent="quiet")
    store.remember("quiet-2", rounds("q2"), agent="quiet")
    for number in range(420):
        store.remember(f"busy-{number}", rounds("b", 20_000), agent="busy")
    assert set(store.recall(["quiet-1", "quiet-2"])) == {"quiet-1", "quiet-2"}
    busy = store.recall([f"busy-{n}" for n in range(420)])
    assert 0 < len(busy) <= 50 and "busy-419" in busy  # inside its half, newest kept
    restarted = ContinuityStore(tmp_path, max_entries=100, max_bytes=2_000_000, agents=2)
    assert set(restarted.recall(["quiet-1", "quiet-2"])) == {"quiet-1", "quiet-2"}


def test_more_agents_than_counted_still_keep_the_global_bound(tmp_path: Path) -> None:
    store = ContinuityStore(tmp_path, max_entries=4, agents=1)
    for agent in ("a", "b", "c"):
        store.remember(f"{agent}-1", rounds(agent), agent=agent)
    for number in range(5):
        store.remember(f"a-{number + 2}", rounds("a"), agent="a")
    assert len(store) == 4
    assert set(store.recall(["b-1", "c-1"])) == {"b-1", "c-1"}  # the largest agent gave way


def test_the_keys_of_one_answer_are_stored_in_one_write_all_or_none(tmp_path: Path) -> None:
    """An answer's rounds go under each of its keys with one write: a failed write stores
    them under none, and each key reads back the rounds with the answer's origin."""
    writes: list[int] = []
    write = FlakyWrite(chunk=1 << 20)

    def counted(fd: int, data: memoryview) -> int:
        writes.append(len(data))
        return write(fd, data)

    store = ContinuityStore(tmp_path, write=counted)
    store.remember(["k1", "k2"], rounds("one"), agent="a", context=["c"], taint_sources=["t"])
    assert len(writes) == 1
    write.chunk, write.failing = 7, True  # a full disk: a few bytes got in
    with pytest.raises(StateWriteFailed):
        store.remember(["k3", "k4"], rounds("two"), agent="a")
    write.failing = False
    for reopened in (store, ContinuityStore(tmp_path)):
        found = reopened.candidates(["k1", "k2", "k3", "k4"])
        assert sorted(found) == ["k1", "k2"]
        assert {(e.origin, tuple(e.context), tuple(e.taint_sources)) for e in found.values()} == {
            ("k1", ("c",), ("t",))
        }
        assert all(e.messages == rounds("one") for e in found.values())
