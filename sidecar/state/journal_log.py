"""Where the request journal's records live (SPEC §8.2): one append-only log for the pod, in
numbered segment files under ``<state>/journal/log/``, with an index of the journals it holds
kept in memory.

A line is one record of one journal: ``{"j": "<agent folder>/<identity>", "t": <time>, ...}``.
Besides the records :mod:`.journal` writes, ``{"link": history, "asked": ...}`` names the
journal a rewritten retry may adopt, and ``{"end": 1}`` drops a journal (its attempt succeeded,
or a later attempt took its records over). A journal that goes has its records overwritten with
spaces as it goes: what a model or a service sent (a credential it should not have sent too) is
kept no longer than the journal, as when each journal was a file unlinked on success.

Why one log and not a file per request: creating, fsyncing (with its directory), unlinking and
closing a file per request cost about 0.5 ms of CPU in the kernel; an append to an open file
and a share of one ``fdatasync`` cost a fraction of that. Records that must be durable before
the sidecar acts on them are **group committed**: the records of every request that asks for a
sync while a batch is with the log's writer thread go together in the next batch, one
``fdatasync`` for all of them; a batch waits up to ``COMMIT_DELAY_S`` for the other requests
with journal work under way (PostgreSQL's commit_delay), and goes at once when each of them is
in it or none is under way, so a request alone never waits. The loop writes a batch's bytes
(a write into the page cache) and the thread only syncs them: the thread takes the GIL back
once per batch, not after each write. The loop never waits for a sync: on this kind of disk
one can take milliseconds, and every agent's requests would wait with it (bench/README.md,
session 8, measured syncing on the loop while the disk is fast and kept the thread). Records
nobody waits for a sync of (an ``end``) are written on the event loop when no batch is out,
else with the next; the records a journal that goes leaves are blanked by one write where they
touch (by the ``end`` line's own when they end where it begins).
Losing an ``end`` in a crash leaves a succeeded attempt's journal, whose retry replays it and
sends nothing again.

Segments: the sidecar opens a new one when it starts (a line a crash tore stays at the end of
the old one) and when the current one passes ``MAX_SEGMENT_BYTES`` or a write into it failed
(a full disk: what reached it is unknown, so nothing more is appended there). A segment goes
once no live journal has records in it and every older segment holding records its ``end``
lines drop has gone (else a restart would bring those journals back).

A journal directory of the previous layout (a file per request, ``<agent>/<identity>.jsonl``
and ``<history>.link``) is moved into the log when the sidecar starts: what it holds inside the
window is resumed like any journal, the rest is deleted (:meth:`JournalLog.recover`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

LOG_DIRECTORY = "log"
SEGMENT_SUFFIX = ".jsonl"
MAX_SEGMENT_BYTES = 4 * 1024 * 1024
# How long a batch that syncs waits for the records of other requests with journal work under
# way (PostgreSQL's commit_delay): one sync and one wake-up of the writer thread then serve
# more of them. A request alone is never delayed.
COMMIT_DELAY_S = 0.003
# The previous layout's file names (a file per journal, a link per failed history).
LEGACY_SUFFIX = ".jsonl"
LEGACY_LINK_SUFFIX = ".link"
# fdatasync commits the data and the file's size (what reading it back needs), not its times.
_sync = getattr(os, "fdatasync", os.fsync)

Key = tuple[str, str]
"""A journal: its agent's folder name and its request identity."""
Span = tuple[int, int, int]
"""Bytes in the log: segment, offset, length."""


@dataclass(slots=True)
class Journal:
    """A journal the log holds: where its records are and when it was last written."""

    written_at: float
    segments: set[int] = field(default_factory=set)
    spans: list[Span] = field(default_factory=list)
    """Where its records are (found again on recovery): read when it is resumed, blanked when
    it goes."""


@dataclass(slots=True)
class Link:
    """A failed attempt's journal, named under the identity of its history (SPEC §8.2)."""

    request: str
    asked: str
    written_at: float


@dataclass(slots=True)
class _Queued:
    key: Key
    data: bytes
    waiter: asyncio.Future[None] | None
    """None for a record nobody waits for (an ``end``); a batch with a waiter syncs."""
    _: KW_ONLY
    erase: tuple[Span, ...] = ()
    """For an ``end``: the records of the journal it drops, blanked as it is written."""
    pins: frozenset[int] = frozenset()
    """For an ``end``: the older segments holding the records it drops."""


Where = tuple[int, int]
"""Where a batch's bytes went: segment and offset."""
_Job = tuple[asyncio.AbstractEventLoop, list[_Queued], bytes, bool, list[Span], Where | None]
"""A batch for the writer thread: the loop to answer on, its records, their bytes, sync, and
the spans to blank when the thread is to write them (a new segment is due), else where the
loop wrote them."""


def line(key: Key, written_at: float, record: dict[str, Any]) -> bytes:
    """One record of journal ``key`` as a log line."""
    journal = {"j": f"{key[0]}/{key[1]}", "t": written_at, **record}
    return orjson.dumps(journal, option=orjson.OPT_APPEND_NEWLINE)  # no copy to add the newline


def starts_afresh(record: dict[str, Any]) -> bool:
    """The first record of an attempt that resumed nothing: what its request's journal held
    before (an attempt that ran nothing, or one older than the window) is not part of it."""
    return "attempt" in record and record.get("origin") == record["attempt"]


def parse(data: bytes) -> Iterator[tuple[Key, float, dict[str, Any]]]:
    """The records in a segment, a line torn by a crash (or a full disk) left out."""
    for _, key, written_at, record in _records(data):
        yield key, written_at, record


def _records(data: bytes) -> Iterator[tuple[Span, Key, float, dict[str, Any]]]:
    """``parse`` with where each line is (segment 0: the caller's)."""
    offset = 0
    for raw in data.split(b"\n"):
        span, offset = (0, offset, len(raw) + 1), offset + len(raw) + 1
        try:
            record = orjson.loads(raw)
            folder, _, request = record.pop("j").partition("/")
            written_at = float(record.pop("t"))
        except (orjson.JSONDecodeError, KeyError, AttributeError, TypeError, ValueError):
            continue
        yield span, (folder, request), written_at, record


class JournalLog:
    """The log and its index. Everything but the writer thread's batches runs on the event loop."""

    def __init__(
        self,
        directory: Path,
        *,
        window_s: float,
        clock: Callable[[], float],
        write: Callable[[int, memoryview, int], int] = os.pwrite,
        in_flight: Callable[[], int] = lambda: 0,
        commit_delay_s: float = COMMIT_DELAY_S,
    ) -> None:
        """``directory``: the journal directory (``<state>/journal``); ``write``: how bytes reach
        a segment (a test's full disk); ``in_flight``: how many requests have journal work
        under way (those not waiting for a sync yet are what a batch's ``commit_delay_s``
        waits for)."""
        self.directory = directory
        self.write = write
        self.segments_directory = directory / LOG_DIRECTORY
        self.window_s = window_s
        self._clock = clock
        self.journals: dict[Key, Journal] = {}
        self.links: dict[Key, Link] = {}  # (agent folder, history) -> the journal it names
        self.counts: dict[str, int] = {}  # agent folder -> its journals
        self._segments: set[int] = set()  # on disk
        self._pins: dict[int, set[int]] = {}  # segment -> older segments its `end`s drop from
        self._current = 0  # the segment appended to (0: none yet), as the loop knows it
        self._last_segment = 0  # the newest segment created (the writer's own)
        self._fd: int | None = None
        self._size = 0
        self._broken = False  # the last write failed: the next one starts a new segment
        self._queue: list[_Queued] = []
        self._writing = False  # a batch is with the writer thread
        self.in_flight = in_flight
        self.commit_delay_s = commit_delay_s
        self._waiting = 0  # queued records whose request waits for their sync
        self._gathering: asyncio.TimerHandle | None = None  # a delayed batch's deadline
        self._batches: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._closed = False
        self._recovered: asyncio.Future[None] | None = None

    # --- index ------------------------------------------------------------------------------

    def count(self, folder: str) -> int:
        return self.counts.get(folder, 0)

    def add(self, key: Key, written_at: float | None = None) -> Journal:
        journal = self.journals.get(key)
        if journal is None:
            stamp = self._clock() if written_at is None else written_at
            journal = self.journals[key] = Journal(stamp)
            self.counts[key[0]] = self.count(key[0]) + 1
        return journal

    def drop(self, key: Key, *, record: bool = True) -> None:
        """Forget a journal and blank its records (what a model or a service sent, credentials
        it should not have sent included, is kept no longer than the journal is, as when a
        journal was a file unlinked); with ``record``, an ``end`` line says so on disk (a
        journal aged out needs none: a restart leaves records older than the window out)."""
        journal = self.journals.pop(key, None)
        if journal is None:
            return
        self.counts[key[0]] = max(0, self.count(key[0]) - 1)
        end = line(key, self._clock(), {"end": 1}) if record and journal.segments else b""
        if end or journal.spans:
            pins = frozenset(journal.segments) if end else frozenset()
            erase = tuple(journal.spans)
            self._enqueue(_Queued(key, end, None, pins=pins, erase=erase))

    def expired(self, written_at: float) -> bool:
        return self._clock() - written_at > self.window_s

    def prune(self, running: Iterable[Key]) -> list[int]:
        """Forget journals and links older than the window (never one whose attempt runs);
        the segments nothing needs any more, for :meth:`delete_segments`."""
        busy = set(running)
        for key in [k for k, j in self.journals.items() if self.expired(j.written_at)]:
            if key not in busy:
                self.drop(key, record=False)
        for key in [k for k, link in self.links.items() if self.expired(link.written_at)]:
            del self.links[key]
        return self._unneeded()

    def _unneeded(self) -> list[int]:
        needed = {segment for journal in self.journals.values() for segment in journal.segments}
        gone: list[int] = []
        for segment in sorted(self._segments):
            if segment == self._current or segment in needed:
                continue
            if any(p in self._segments and p not in gone for p in self._pins.get(segment, ())):
                continue  # its `end` lines still drop records an older segment holds
            gone.append(segment)
        for segment in gone:
            self._segments.discard(segment)
            self._pins.pop(segment, None)
        return gone

    def delete_segments(self, segments: list[int]) -> None:
        for segment in segments:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._segment_path(segment))

    # --- writing ----------------------------------------------------------------------------

    def append(self, key: Key, data: bytes) -> asyncio.Future[None]:
        """Write records of journal ``key``: done once they are synced (OSError if they could
        not be written). The future itself, not a coroutine around it: the request's task
        waits on it without another frame to resume."""
        waiter = asyncio.get_running_loop().create_future()
        self._enqueue(_Queued(key, data, waiter))
        return waiter

    def _enqueue(self, queued: _Queued) -> None:
        self._queue.append(queued)
        self._waiting += queued.waiter is not None
        if self._gathering is not None:
            self.others_may_come()
        elif not self._writing:
            self._next_batch()

    def others_may_come(self) -> None:
        """A delayed batch goes as soon as no other request with journal work under way
        could join it (each waits for its sync, or has ended)."""
        if self._gathering is not None and self.in_flight() <= self._waiting:
            self._gathering.cancel()
            self._gathering = None
            self._write_queue()

    def _next_batch(self) -> None:
        """Start the next batch now, or, when it syncs and other requests with journal work
        under way could join it, after ``commit_delay_s`` at the most."""
        if self._waiting and self.commit_delay_s > 0 and self.in_flight() > self._waiting:
            loop = asyncio.get_running_loop()
            self._gathering = loop.call_later(self.commit_delay_s, self._gathered)
            return
        self._write_queue()

    def _gathered(self) -> None:
        self._gathering = None
        self._write_queue()

    def _write_queue(self) -> None:
        """Start the next batch: here when it does not sync (a write into the page cache is
        cheaper than a thread hop), else written here and synced in the writer thread (written
        there too when a new segment is due: opening one syncs its directory)."""
        batch, sync = self._queue, self._waiting > 0
        if not batch:
            return
        self._queue, self._waiting = [], 0
        data = b"".join([q.data for q in batch])
        erase = [span for q in batch for span in q.erase]
        appendable = self._fd is not None and not self._broken
        if appendable and not sync:
            try:
                self._done(batch, self._write(data, False, erase), None)
            except OSError as exc:
                self._done(batch, (0, 0), exc)
            return
        if self._closed:
            self._done(batch, (0, 0), OSError("the request journal is closed"))
            return
        written = None
        if appendable and self._size < MAX_SEGMENT_BYTES:
            # Written here, synced there: the thread takes the GIL back once per batch, after
            # its sync, where each write of its own cost it another round.
            try:
                written = self._write(data, False, erase)
            except OSError as exc:
                self._done(batch, (0, 0), exc)
                return
            data, erase = b"", []
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_batches, daemon=True)
            self._writer.start()
        self._writing = True
        self._batches.put((asyncio.get_running_loop(), batch, data, sync, erase, written))

    def _write_batches(self) -> None:
        """The writer thread: one batch at a time, each answered on its event loop. Its own
        thread rather than the loop's executor: a batch costs a queue put and a wake-up, not
        the executor's futures chained into the loop's (about half the CPU of a hop)."""
        while (job := self._batches.get()) is not None:
            loop, batch, data, sync, erase, written = job
            try:
                if written is None:  # a new segment is due (or the last write failed)
                    where, failure = self._write(data, sync, erase), None
                else:  # the loop wrote its bytes
                    where, failure = written, None
                    self._make_durable()
            except BaseException as exc:  # answered on the loop, whatever it is
                where, failure = (0, 0), exc
            try:
                loop.call_soon_threadsafe(self._written, batch, where, failure)
            except RuntimeError:  # the loop closed: nobody waits any more
                self._writing = False

    def _written(self, batch: list[_Queued], where: Where, failure: BaseException | None) -> None:
        self._writing = False
        self._done(batch, where, failure)
        self._next_batch()

    def _done(self, batch: list[_Queued], where: Where, failure: BaseException | None) -> None:
        """``where``: the segment and offset the batch's bytes went to."""
        if failure is None:
            self._segments.add(where[0])
            self._current = where[0]
            self._landed(batch, *where)
        elif any(q.waiter is None for q in batch):
            log.warning("request journal: an end record was not written: %s", failure)
        for queued in batch:
            waiter = queued.waiter
            if waiter is None or waiter.done():  # its request went away meanwhile
                continue
            if failure is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(failure)

    def _landed(self, batch: list[_Queued], segment: int, offset: int) -> None:
        now = self._clock()
        for queued in batch:
            length = len(queued.data)
            journal = self.journals.get(queued.key)
            if journal is not None:
                journal.segments.add(segment)
                journal.spans.append((segment, offset, length))
                journal.written_at = now
            offset += length
            older = queued.pins - {segment} if queued.pins else None
            if older:
                self._pins.setdefault(segment, set()).update(older)

    def _write(self, data: bytes, sync: bool, erase: list[Span]) -> Where:
        """Append ``data`` to the current segment (a new one when due), synced if ``sync``,
        then blank the spans ``erase``; the segment and offset ``data`` went to. One batch at a
        time: in the writer thread, or on the loop while no batch is with it."""
        if data and (self._fd is None or self._broken or self._size >= MAX_SEGMENT_BYTES):
            self._open_segment()
        offset = self._size
        erase = _coalesced(erase) if erase else erase
        lead = b""
        if data and erase and erase[-1][0] == self._last_segment and sum(erase[-1][1:]) == offset:
            # Records that end where ``data`` begins (a request's own, usually, as its ``end``
            # goes): blanked by the same write.
            lead = _blank_line(erase.pop()[2])
        if data or sync:
            assert self._fd is not None
            try:
                written = lead + data if lead else data
                start, view = offset - len(lead), memoryview(written)
                while view:
                    view = view[self.write(self._fd, view, start + len(written) - len(view)) :]
                self._size = offset + len(data)
            except OSError:
                self._broken = True  # what reached the file is unknown: append nowhere after it
                raise
            if sync:
                self._make_durable()
        if erase:
            self._blank(erase)
        return self._last_segment, offset

    def _make_durable(self) -> None:
        """Make what was written to the current segment durable (in the writer thread)."""
        assert self._fd is not None
        try:
            _sync(self._fd)
        except OSError:
            self._broken = True  # what reached the file is unknown: append nowhere after it
            raise

    def _blank(self, spans: list[Span]) -> None:
        """Overwrite records with spaces (a line a reader skips), ``spans`` coalesced. Not
        synced, like the unlink of a journal file was not: a crash may bring a succeeded
        attempt's journal back, whose retry replays it and sends nothing again."""
        for segment, offset, length in spans:
            blank = _blank_line(length)
            try:
                if segment == self._last_segment and self._fd is not None:
                    os.pwrite(self._fd, blank, offset)
                    continue
                fd = os.open(self._segment_path(segment), os.O_WRONLY)
                try:
                    os.pwrite(fd, blank, offset)
                finally:
                    os.close(fd)
            except OSError as exc:  # gone with its segment, or a disk error: nothing to keep
                log.debug("request journal: records not blanked: %s", exc)

    def _open_segment(self) -> None:
        self.segments_directory.mkdir(parents=True, exist_ok=True)
        number = self._last_segment + 1
        while True:  # past a segment recovery could not read, never into it
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
                fd = os.open(self._segment_path(number), flags, 0o600)
                break
            except FileExistsError:
                number += 1
        try:
            _fsync_directory(self.segments_directory)  # the segment itself survives a crash
        except OSError:
            os.close(fd)
            raise
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._size, self._broken = fd, 0, False
        self._last_segment = number

    def _segment_path(self, segment: int) -> Path:
        return self.segments_directory / f"{segment:012d}{SEGMENT_SUFFIX}"

    def close(self) -> None:
        """At shutdown, after the last request: what is queued is written, then the segment
        is closed."""
        self._closed = True
        if self._gathering is not None:
            self._gathering.cancel()
            self._gathering = None
        if self._writer is not None:
            self._batches.put(None)
            self._writer.join()
            self._writer = None
        batch, self._queue, self._waiting = self._queue, [], 0
        if batch:  # its requests may still wait for it (queued behind the thread's last batch)
            try:
                if self._fd is None or self._broken:
                    raise OSError("the request journal is closed")
                erase = [span for q in batch for span in q.erase]
                self._done(batch, self._write(b"".join(q.data for q in batch), True, erase), None)
            except OSError as exc:
                self._done(batch, (0, 0), exc)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # --- reading ----------------------------------------------------------------------------

    def read(self, key: Key, spans: list[Span]) -> list[dict[str, Any]]:
        """The records of journal ``key`` at ``spans`` (in the order written), in a thread.
        Only its own bytes are read, not the segments around them (up to ``MAX_SEGMENT_BYTES``
        each, read and split for every resumed request before)."""
        records: list[dict[str, Any]] = []
        for data in self._read_spans(spans):
            for found, _, record in parse(data):
                if found != key:
                    continue
                if "end" in record or starts_afresh(record):
                    records.clear()  # an earlier journal of the same request
                if "end" not in record:
                    records.append(record)
        return records

    def _read_spans(self, spans: list[Span]) -> Iterator[bytes]:
        """The bytes at each span (a span in a segment that went is skipped)."""
        opened: dict[int, int | None] = {}
        try:
            for segment, offset, length in spans:
                if segment not in opened:
                    with contextlib.suppress(FileNotFoundError):
                        opened[segment] = None
                        opened[segment] = os.open(self._segment_path(segment), os.O_RDONLY)
                fd = opened[segment]
                if fd is not None:
                    yield os.pread(fd, length, offset)
        finally:
            for fd in opened.values():
                if fd is not None:
                    os.close(fd)

    @property
    def is_recovered(self) -> bool:
        """Whether :meth:`recovered` has read the log (for every request but the first)."""
        return self._recovered is not None and self._recovered.done()

    async def recovered(self) -> None:
        """Read what the log holds (and move a previous layout's journals in) once, before the
        first request uses the index."""
        if self.is_recovered:
            return
        if self._recovered is None:
            self._recovered = asyncio.get_running_loop().create_future()
            try:
                await asyncio.to_thread(self.recover)
            except OSError as exc:
                # An unreadable log resumes nothing; its writes fail too, and the driver then
                # sends no destructive call.
                log.warning("request journal unavailable: %s", exc)
            finally:
                self._recovered.set_result(None)
        await asyncio.shield(self._recovered)

    def recover(self) -> None:
        """Rebuild the index from the segments on disk (in a thread, before any request)."""
        # A restart appends to a new segment: nothing follows a line a crash tore.
        self._last_segment = max(self._segments_on_disk(), default=0)
        self._import_legacy()
        for segment in sorted(self._segments_on_disk()):
            self._segments.add(segment)
            self._index(segment, self._segment_path(segment).read_bytes())
        for key in [k for k, j in self.journals.items() if self.expired(j.written_at)]:
            self._forget_now(key)
        for key, link in list(self.links.items()):
            if self.expired(link.written_at) or (key[0], link.request) not in self.journals:
                del self.links[key]

    def _segments_on_disk(self) -> list[int]:
        try:
            names = [entry.name for entry in os.scandir(self.segments_directory)]
        except FileNotFoundError:
            return []
        stems = [name.removesuffix(SEGMENT_SUFFIX) for name in names]
        return [int(stem) for stem in stems if stem.isdigit()]

    def _index(self, segment: int, data: bytes) -> None:
        for (_, offset, length), key, written_at, record in _records(data):
            if "end" in record:
                journal = self.journals.get(key)
                if journal is not None:
                    self._pins.setdefault(segment, set()).update(journal.segments - {segment})
                    self._forget_now(key)
                continue
            if "link" in record:  # it names a journal of lines before it
                if key in self.journals:
                    self.journals[key].segments.add(segment)
                    self.journals[key].spans.append((segment, offset, length))
                    asked = str(record.get("asked", ""))
                    self.links[(key[0], str(record["link"]))] = Link(key[1], asked, written_at)
                continue
            journal = self.add(key, written_at)
            journal.segments.add(segment)
            journal.spans.append((segment, offset, length))
            journal.written_at = max(journal.written_at, written_at)

    def _forget_now(self, key: Key) -> None:
        """Drop a journal while recovering: its records are blanked here (in the thread that
        recovers, before any batch), no ``end`` line is needed."""
        journal = self.journals.pop(key)
        self.counts[key[0]] = max(0, self.count(key[0]) - 1)
        self._blank(_coalesced(journal.spans))

    def _import_legacy(self) -> None:
        """Move the journals and links of the file-per-request layout into a new segment, then
        delete their files (those older than the window too)."""
        try:
            folders = [e for e in os.scandir(self.directory) if e.is_dir()]
        except FileNotFoundError:
            return
        folders = [f for f in folders if f.name != LOG_DIRECTORY]
        journals: list[bytes] = []
        links: list[bytes] = []  # after the journals they name
        files: list[str] = []
        for folder in folders:
            for entry in os.scandir(folder.path):
                files.append(entry.path)
                written_at = entry.stat().st_mtime
                if self.expired(written_at):
                    continue
                found = _legacy_lines(folder.name, entry.name, entry.path, written_at)
                (links if entry.name.endswith(LEGACY_LINK_SUFFIX) else journals).extend(found)
        lines = journals + links
        if lines:
            self._write(b"".join(lines), True, [])
            self._segments.add(self._last_segment)
        for path in files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        for folder in folders:
            with contextlib.suppress(OSError):
                os.rmdir(folder.path)
        if files:
            log.warning(
                "request journal: %d files of the previous layout (a file per request) moved "
                "into %s (%d records inside the retry window kept)",
                len(files),
                self.segments_directory,
                len(lines),
            )


def _legacy_lines(folder: str, name: str, path: str, written_at: float) -> list[bytes]:
    """A previous layout's journal (``<identity>.jsonl``) or link (``<history>.link``) as log
    lines; a torn or foreign line is left out."""
    data = Path(path).read_bytes()
    if name.endswith(LEGACY_SUFFIX):
        request = name.removesuffix(LEGACY_SUFFIX)
        records = []
        for raw in data.splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                record = orjson.loads(raw)
                if isinstance(record, dict):
                    records.append(record)
        return [line((folder, request), written_at, record) for record in records]
    if name.endswith(LEGACY_LINK_SUFFIX):
        try:
            named = orjson.loads(data)
            request, asked = named["request"], named["asked"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return []
        if not (isinstance(request, str) and request.isalnum()):
            return []
        history = name.removesuffix(LEGACY_LINK_SUFFIX)
        return [line((folder, request), written_at, {"link": history, "asked": asked})]
    return []


def _coalesced(spans: Iterable[Span]) -> list[Span]:
    """``spans`` in order, those that touch made one: one write of spaces, not one a record."""
    merged: list[Span] = []
    for segment, offset, length in sorted(spans):
        if merged and merged[-1][0] == segment and sum(merged[-1][1:]) == offset:
            merged[-1] = (segment, merged[-1][1], merged[-1][2] + length)
        else:
            merged.append((segment, offset, length))
    return merged


def _blank_line(length: int) -> bytes:
    """Spaces in place of ``length`` bytes of records: one line a reader skips."""
    return b" " * (length - 1) + b"\n"


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
