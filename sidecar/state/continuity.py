"""Hidden tool rounds remembered per conversation (docs/contract.md §4.2 point 14, §8.3).

The runner only ever sees final answers, so the rounds that led to an answer (assistant
tool-call turns and tool results) are stored under a key derived from the conversation up to
and including that answer. When the conversation comes back, the engine finds them by the same
key and re-inserts them.

Storage is one append-only log under ``<state>/continuity/`` (one JSON line per entry: a single
write per request, no file churn) with an in-memory index of key -> byte range, rebuilt by
scanning the log after a restart.

- Bounds: each agent has its own quota (the store's entry and byte bounds divided by the
  number of agents); an agent over its quota loses its own least recently used entries, never
  another agent's. Only when more agents write than the store was sized for does the global
  bound evict, and then from the agent that holds the most. After a restart "recent" means
  recently written.
- Writes are atomic for the store: a line is written whole (short writes are continued) before
  the index points at it. A failed write (a full disk) raises :class:`StateWriteFailed`, leaves
  the index as it was, resynchronises the log size from ``fstat`` and starts the next entry on
  a fresh line, so a torn line never hides the entry after it.
- Compaction (when dead entries dominate the log) copies the live entries into a new file in a
  worker thread while requests go on; entries written meanwhile are appended to the copy before
  it replaces the log. Only that last, small step runs on the caller's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..mediation.commands import Remembered

log = logging.getLogger(__name__)

LOG_NAME = "rounds.jsonl"
# Compact when the log is this much larger than its live entries (and not tiny).
COMPACT_RATIO = 3
COMPACT_MIN_BYTES = 1 << 20
# Entries written during a compaction are copied on the caller's thread only up to this much;
# more goes to the worker thread for another round.
CATCH_UP_BYTES = 256 << 10
# Live entries are bounded in bytes too: rounds carry tool results of up to 16 KiB each.
DEFAULT_MAX_BYTES = 256 << 20
_ENTRY_START = b'{"key":'

Write = Callable[[int, memoryview], int]
Span = tuple[int, int]  # (offset, length) of an entry's line in the log


class StateWriteFailed(Exception):
    """An entry could not be stored (the store itself is unchanged and consistent). The caller
    has a finished answer: log it, count it, audit it, and answer anyway."""


@dataclass(slots=True)
class _AgentEntries:
    index: OrderedDict[str, Span] = field(default_factory=OrderedDict)
    bytes: int = 0


@dataclass(slots=True)
class _Compaction:
    temporary: Path
    snapshot_end: int  # log offset where the live-entry snapshot was taken
    copied_until: int  # log offset up to which the log's tail is already in the copy
    copied_size: int  # bytes of live entries in the copy (before the tail)
    offsets: dict[str, int]  # key -> offset in the copy, for entries of the snapshot
    job: Future[Any]


class ContinuityStore:
    def __init__(
        self,
        state_dir: Path,
        max_entries: int = 10000,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        agents: int = 1,
        write: Write = os.write,
    ) -> None:
        """``agents``: how many agents share the store (each gets 1/agents of the bounds);
        ``write``: how bytes reach the log (``os.write``; tests inject failures here)."""
        self.directory = Path(state_dir) / "continuity"
        self.path = self.directory / LOG_NAME
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.agent_max_entries = max(1, max_entries // max(1, agents))
        self.agent_max_bytes = max(1, max_bytes // max(1, agents))
        self._write = write
        self._agents: dict[str, _AgentEntries] | None = None
        self._owner: dict[str, str] = {}  # key -> agent
        self._fd: int | None = None
        self._size = 0
        self._torn = False  # the log ends in a partial line
        self._live_bytes = 0
        self._compaction: _Compaction | None = None
        self._compact_after = COMPACT_MIN_BYTES  # raised after a failed compaction
        self._worker: ThreadPoolExecutor | None = None

    # --- the API ----------------------------------------------------------------------------

    def recall(self, keys: list[str]) -> dict[str, list[dict[str, Any]]]:
        return {key: found.messages for key, found in self.candidates(keys).items()}

    def candidates(self, keys: list[str]) -> dict[str, Remembered]:
        """What is stored under each of ``keys`` that has an entry, with its context."""
        try:
            agents = self._open()
        except OSError as exc:
            log.warning("continuity store unavailable, no rounds restored: %s", exc)
            return {}
        self._poll_compaction()
        found: dict[str, Remembered] = {}
        for key in keys:
            agent = self._owner.get(key)
            if agent is None:
                continue
            entries = agents[agent].index
            entry = self._read(key, *entries[key])
            if entry is not None:
                found[key] = entry
                entries.move_to_end(key)
        return found

    def remember(
        self,
        keys: str | list[str],
        messages: list[dict[str, Any]],
        *,
        agent: str,
        context: list[str] | None = None,
        origin: str | None = None,
        taint_sources: list[str] | None = None,
    ) -> None:
        """Store ``messages`` under each of ``keys`` for ``agent``, all or none (one write);
        raises :class:`StateWriteFailed`. ``context``, ``origin`` (by default the first key) and
        ``taint_sources`` are kept with them (see :class:`Remembered`)."""
        keys = [keys] if isinstance(keys, str) else keys
        if not keys:
            return
        try:
            self._open()
        except OSError as exc:
            raise StateWriteFailed(f"continuity store unavailable: {exc.strerror or exc}") from exc
        self._poll_compaction()
        entry: dict[str, Any] = {"agent": agent, "messages": messages}
        entry |= {"context": context or [], "origin": origin or keys[0]}
        if taint_sources:
            entry["taint"] = taint_sources
        # The rounds are serialised once for all keys: each line is the key, then the rest.
        rest = b"," + orjson.dumps(entry)[1:] + b"\n"
        lines = [_ENTRY_START + orjson.dumps(key) + rest for key in keys]
        offset = self._append(b"".join(lines))  # raises before the index changes
        for key, line in zip(keys, lines, strict=True):
            self._index(agent, key, (offset, len(line)))
            offset += len(line)
        self._evict(agent)
        self._maybe_compact()

    async def close(self) -> None:
        if self._compaction is not None:
            # The worker may be reading the log: let it end, then drop its unfinished copy.
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(self._compaction.job)
            self._abandon_compaction()
        if self._worker is not None:
            self._worker.shutdown()
            self._worker = None
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        self._agents = None
        self._owner = {}

    def finish_compaction(self) -> None:
        """Wait for a running compaction and put its result in place (shutdown and tests)."""
        while self._compaction is not None:
            self._compaction.job.exception()
            self._poll_compaction(catch_up_bytes=None)

    def __len__(self) -> int:
        self._open()
        return len(self._owner)

    # --- the log ----------------------------------------------------------------------------

    def _open(self) -> dict[str, _AgentEntries]:
        if self._agents is not None:
            return self._agents
        self.directory.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        self._agents, self._owner = {}, {}
        self._size = self._live_bytes = 0
        with open(self.path, "rb") as existing:
            for line in existing:
                self._load_line(line)
        # A torn last line (a crash mid-write): the next entry starts on a fresh line.
        self._torn = self._size > 0 and not _ends_with_newline(self.path)
        for agent in list(self._agents):
            self._evict(agent)
        return self._agents

    def _load_line(self, line: bytes) -> None:
        offset = self._size
        self._size += len(line)
        entry = _parse(line)
        if entry is None:
            # A torn line followed by an entry on the same line (an older writer did not start
            # a fresh line after a failed write): the entry still counts.
            start = line.rfind(_ENTRY_START, 1)
            entry = _parse(line[start:]) if start > 0 else None
            if entry is None:
                return  # a torn or foreign line is skipped, not fatal
            offset, line = offset + start, line[start:]
        key = entry["key"]
        self._drop(key)
        if not entry.get("drop"):
            self._index(str(entry.get("agent", "")), key, (offset, len(line)))

    def _append(self, data: bytes) -> int:
        """Write ``data`` whole at the end of the log; return the offset where it starts."""
        assert self._fd is not None
        prefix = b"\n" if self._torn else b""
        start = self._size
        view = memoryview(prefix + data)
        try:
            while view:
                view = view[self._write(self._fd, view) :]
        except OSError as exc:
            self._resync(start)
            raise StateWriteFailed(f"continuity entry not stored: {exc.strerror or exc}") from exc
        self._size = start + len(prefix) + len(data)
        self._torn = False
        return start + len(prefix)

    def _resync(self, start: int) -> None:
        """After a failed write: the log's real size, and whether a partial line is at its end."""
        assert self._fd is not None
        try:
            size = os.fstat(self._fd).st_size
        except OSError:
            size = start + 1  # unknown: assume a partial line, a fresh line costs one byte
        self._torn = self._torn if size == start else True
        self._size = size

    def _read(self, key: str, offset: int, length: int) -> Remembered | None:
        assert self._fd is not None
        try:
            entry = orjson.loads(os.pread(self._fd, length, offset))
            if entry["key"] != key:
                raise ValueError("index points at another entry")
            # Entries of older builds have no context: they match on their key alone.
            return Remembered(
                entry["messages"],
                entry.get("context", []),
                entry.get("origin", key),
                entry.get("taint", []),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("continuity entry %s unreadable: %s", key, exc)
            return None

    # --- the index and its bounds -----------------------------------------------------------

    def _index(self, agent: str, key: str, span: Span) -> None:
        assert self._agents is not None
        self._drop(key)
        entries = self._agents.setdefault(agent, _AgentEntries())
        entries.index[key] = span
        entries.bytes += span[1]
        self._live_bytes += span[1]
        self._owner[key] = agent

    def _drop(self, key: str) -> None:
        assert self._agents is not None
        agent = self._owner.pop(key, None)
        if agent is None:
            return
        entries = self._agents[agent]
        length = entries.index.pop(key)[1]
        entries.bytes -= length
        self._live_bytes -= length
        if not entries.index:
            del self._agents[agent]

    def _evict(self, agent: str) -> None:
        """Keep ``agent`` inside its quota and the store inside its bound; the newest entry of
        an agent is kept even when it alone exceeds the byte quota."""
        assert self._agents is not None
        dropped: list[str] = []
        entries = self._agents.get(agent)
        while (
            entries is not None
            and len(entries.index) > 1
            and (
                len(entries.index) > self.agent_max_entries or entries.bytes > self.agent_max_bytes
            )
        ):
            dropped.append(next(iter(entries.index)))
            self._drop(dropped[-1])
        while victim := self._over_global_bound():
            dropped.append(next(iter(victim.index)))
            self._drop(dropped[-1])
        if dropped:
            self._write_tombstones(dropped)

    def _over_global_bound(self) -> _AgentEntries | None:
        """The agent to evict from when the store as a whole is over its bound: the one holding
        the most of what is over (only reachable when more agents write than were counted)."""
        assert self._agents is not None
        if len(self._owner) > self.max_entries:
            return max(self._agents.values(), key=lambda e: len(e.index))
        if self._live_bytes > self.max_bytes:
            largest = max(self._agents.values(), key=lambda e: e.bytes)
            return largest if len(largest.index) > 1 else None
        return None

    def _write_tombstones(self, keys: list[str]) -> None:
        """Keep evicted entries dropped after a restart. If this write fails they come back at
        the next start and are evicted again then: nothing is lost, so nothing is raised."""
        data = b"".join(orjson.dumps({"key": key, "drop": True}) + b"\n" for key in keys)
        try:
            self._append(data)
        except StateWriteFailed as exc:
            log.warning("continuity eviction not recorded: %s", exc)

    # --- compaction -------------------------------------------------------------------------

    def _maybe_compact(self) -> None:
        if (
            self._compaction is None
            and self._size > self._compact_after
            and self._size > COMPACT_RATIO * self._live_bytes
        ):
            self._start_compaction()

    def _start_compaction(self) -> None:
        assert self._agents is not None and self._fd is not None
        snapshot = [
            (key, span) for entries in self._agents.values() for key, span in entries.index.items()
        ]
        temporary = self.path.with_suffix(".compact")
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="continuity-compaction")
        job = self._worker.submit(copy_entries, self._fd, snapshot, temporary)
        self._compaction = _Compaction(temporary, self._size, self._size, 0, {}, job)

    def _poll_compaction(self, catch_up_bytes: int | None = CATCH_UP_BYTES) -> None:
        """Put a finished copy in place: append what was written meanwhile (in the worker while
        that is more than ``catch_up_bytes``), then swap the copy in and re-point the index."""
        compaction = self._compaction
        if compaction is None or not compaction.job.done():
            return
        try:
            result = compaction.job.result()
        except OSError as exc:
            log.warning("continuity compaction failed, the log is kept as it is: %s", exc)
            self._abandon_compaction()
            self._compact_after = self._size + COMPACT_MIN_BYTES
            return
        if isinstance(result, dict):  # the first round: the live entries
            compaction.offsets = result
            compaction.copied_size = os.stat(compaction.temporary).st_size
        pending = self._size - compaction.copied_until
        assert self._worker is not None and self._fd is not None
        if catch_up_bytes is not None and pending > catch_up_bytes:
            compaction.job = self._worker.submit(
                copy_range, self._fd, compaction.copied_until, self._size, compaction.temporary
            )
            compaction.copied_until = self._size
            return
        try:
            copy_range(self._fd, compaction.copied_until, self._size, compaction.temporary)
            self._swap(compaction)
        except OSError as exc:
            log.warning("continuity compaction failed, the log is kept as it is: %s", exc)
            self._abandon_compaction()
            self._compact_after = self._size + COMPACT_MIN_BYTES

    def _swap(self, compaction: _Compaction) -> None:
        assert self._agents is not None and self._fd is not None
        shift = compaction.copied_size - compaction.snapshot_end
        for entries in self._agents.values():
            for key, (offset, length) in entries.index.items():
                # Entries older than the snapshot were in it; newer ones came with the tail.
                if offset >= compaction.snapshot_end:
                    entries.index[key] = (offset + shift, length)
                else:
                    entries.index[key] = (compaction.offsets[key], length)
        os.replace(compaction.temporary, self.path)
        old, self._fd = self._fd, os.open(self.path, os.O_RDWR | os.O_APPEND, 0o600)
        os.close(old)
        self._size = os.fstat(self._fd).st_size
        self._compaction = None

    def _abandon_compaction(self) -> None:
        assert self._compaction is not None
        with contextlib.suppress(FileNotFoundError):
            self._compaction.temporary.unlink()
        self._compaction = None


def copy_entries(source_fd: int, entries: list[tuple[str, Span]], destination: Path) -> dict:
    """Write the live entries into a new log (in a worker thread); return key -> new offset."""
    offsets: dict[str, int] = {}
    size = 0
    with open(destination, "wb") as out:
        for key, (offset, length) in entries:
            out.write(os.pread(source_fd, length, offset))
            offsets[key] = size
            size += length
        out.flush()
        os.fsync(out.fileno())
    return offsets


def copy_range(source_fd: int, start: int, end: int, destination: Path) -> None:
    """Append the log's bytes ``start:end`` (entries written during the compaction) to the copy."""
    with open(destination, "ab") as out:
        while start < end:
            chunk = os.pread(source_fd, min(end - start, 1 << 20), start)
            if not chunk:
                break
            out.write(chunk)
            start += len(chunk)


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
        return None
    return entry


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as file:
        file.seek(-1, os.SEEK_END)
        return file.read(1) == b"\n"
