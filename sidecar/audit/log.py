"""Hash-chained, append-only audit log: one JSON line per record, one file per agent.

Every record carries ``prev`` (the ``hash`` of the record before it, 64 zeros for the first)
and ``hash`` (sha256 of the record's canonical JSON without ``hash``). Editing, deleting or
reordering lines breaks the chain; ``clawc audit verify`` finds where. A chain alone cannot show
that records were cut from its end, so beside each log ``<agent>.head`` holds the hash of its
last record: verify checks the log still ends there, and a sidecar that starts on a log cut
short marks its next record with ``audit_gap`` so the cut stays on record.

Durability policy: a record is chained (``prev``, ``hash``) the moment it is appended, so
records of one agent are strictly ordered. The records one event-loop iteration appends for an
agent are written to the OS together at the end of that iteration, in one write, and the head
after them (a write per record was two syscalls per request); at most ``MAX_UNWRITTEN``
records wait, and a crash between the two writes leaves the head at most that many records
behind, which verify and a restart accept. ``fsync`` to disk runs in a background thread in
batches, at most ``fsync_interval_s`` after a write, and once more on :meth:`AuditLog.close`.
A crash of the sidecar process can lose the records of the loop iteration it died in (their
clients already had their answers); a host crash the last fraction of a second.
``fsync_interval_s=0`` writes and fsyncs every record before ``append`` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import uuid
from pathlib import Path
from typing import Any

import orjson

from clawpod.sidecar.observability.logs import rfc3339_now

log = logging.getLogger("sidecar.audit")

GENESIS = "0" * 64
# Records of one agent waiting for their write; also how far behind a head may be.
MAX_UNWRITTEN = 64
AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
TAIL_BYTES = 1 << 20
DEFAULT_FSYNC_INTERVAL_S = 0.2
# Fields append() always sets itself; a caller's values for them are dropped.
_RESERVED = frozenset({"agent", "prev", "hash"})


def canonical_json(record: dict[str, Any]) -> bytes:
    """The bytes a record's hash covers: compact JSON, keys sorted, ``hash`` excluded."""
    # append() hashes a record before it has one: no copy needed then.
    body = (
        {key: value for key, value in record.items() if key != "hash"}
        if "hash" in record
        else record
    )
    try:
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        # orjson refuses integers beyond 64 bits; such values are stored as text instead.
        return orjson.dumps(_json_safe(body), option=orjson.OPT_SORT_KEYS)


def record_hash(record: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(record)).hexdigest()


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str), parse_int=_int_or_text)


def _int_or_text(text: str) -> int | str:
    number = int(text)
    return number if -(2**63) <= number < 2**64 else text


def audit_path(state_dir: Path, agent_id: str) -> Path:
    if not AGENT_ID.match(agent_id):
        raise ValueError(f"agent id {agent_id!r} cannot name an audit file")
    return state_dir / "audit" / f"{agent_id}.jsonl"


def head_path(log_path: Path) -> Path:
    return log_path.with_suffix(".head")


def read_head(log_path: Path) -> str | None:
    """The last record hash the sidecar wrote beside ``log_path``, if it wrote one."""
    try:
        text = head_path(log_path).read_text(encoding="ascii").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    return text or None


def now_rfc3339() -> str:
    return rfc3339_now()


class _AgentFile:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.prev, recent, self.torn = _resume(path)
        head = read_head(path)
        # The head may lag one write behind (a crash between the two writes), never more.
        self.gap = head if head is not None and head not in recent else None
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.head_fd = os.open(head_path(path), os.O_WRONLY | os.O_CREAT, 0o600)
        self.unwritten: list[bytes] = []

    def write_unwritten(self) -> None:
        """Write the waiting record lines, then the head naming the last of them."""
        if self.unwritten:
            lines, self.unwritten = self.unwritten, []
            self.write_line(b"".join(lines))
            self.write_head(self.prev)

    def write_line(self, line: bytes) -> None:
        """Append one record line. After a torn line (a crash or a failed write left a partial
        line), a newline comes first: the torn line stays visible to verify, the new record
        starts clean."""
        data = memoryview(b"\n" + line if self.torn else line)
        self.torn = True
        while data:
            data = data[os.write(self.fd, data) :]
        self.torn = False

    def fds(self) -> list[int]:
        return [self.fd, self.head_fd]

    def write_head(self, record_hash: str) -> None:
        # Fixed length, written in place: one syscall, never a partially shorter file.
        os.pwrite(self.head_fd, record_hash.encode() + b"\n", 0)

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.head_fd)


def _resume(path: Path) -> tuple[str, frozenset[str], bool]:
    """The hash to chain the next record to, the hashes of the last ``MAX_UNWRITTEN + 1``
    records (where a head may point), and whether the file ends in a torn line."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return GENESIS, frozenset(), False
    if size == 0:
        return GENESIS, frozenset(), False
    with path.open("rb") as handle:
        handle.seek(max(0, size - TAIL_BYTES))
        tail = handle.read()
        lines = tail.splitlines()[1:] if size > TAIL_BYTES else tail.splitlines()
        recent = _last_hashes(lines, MAX_UNWRITTEN + 1)
        if size > TAIL_BYTES and len(recent) <= MAX_UNWRITTEN:
            handle.seek(0)
            tail = handle.read()
            recent = _last_hashes(tail.splitlines(), MAX_UNWRITTEN + 1)
    torn = not tail.endswith(b"\n")
    return (recent[0] if recent else GENESIS), frozenset(recent), torn


def _last_hashes(lines: list[bytes], count: int) -> list[str]:
    """The hashes of the last ``count`` records, newest first."""
    hashes: list[str] = []
    for line in reversed(lines):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("hash"), str):
            hashes.append(record["hash"])
            if len(hashes) == count:
                break
    return hashes


class AuditLog:
    def __init__(
        self, state_dir: Path, *, fsync_interval_s: float = DEFAULT_FSYNC_INTERVAL_S
    ) -> None:
        self.state_dir = Path(state_dir)
        self.fsync_interval_s = fsync_interval_s
        self._files: dict[str, _AgentFile] = {}
        self._waiting: list[_AgentFile] = []  # files with lines to write this loop iteration
        self._dirty: set[str] = set()
        self._wake: asyncio.Event | None = None
        self._syncer: asyncio.Task[None] | None = None
        self._closed = False

    async def append(self, agent_id: str, record: dict[str, Any]) -> dict[str, Any]:
        """Chain, write and return one record (adds id, time, agent, prev, hash)."""
        handle = self._files.get(agent_id)
        if handle is None:
            handle = _AgentFile(audit_path(self.state_dir, agent_id))
            if not self._closed:
                self._files[agent_id] = handle
        if _RESERVED.isdisjoint(record):
            full = dict(record)
        else:
            full = {key: value for key, value in record.items() if key not in _RESERVED}
        full["id"] = record.get("id") or uuid.uuid4().hex
        full.setdefault("time", now_rfc3339())
        full["agent"] = agent_id
        full["prev"] = handle.prev
        if handle.gap is not None:
            full["audit_gap"] = {"head_was": handle.gap}
        canonical = canonical_json(full)
        full["hash"] = record_hash = hashlib.sha256(canonical).hexdigest()
        # The stored line is the canonical JSON with the hash appended: serialised once.
        line = b'%s,"hash":"%s"}\n' % (canonical[:-1], record_hash.encode())
        # No await from prev to here: per-agent order is the order of appends.
        handle.unwritten.append(line)
        handle.prev, handle.gap = record_hash, None
        if self._closed:
            # A call that outlived shutdown (shielded from its client) is still recorded.
            handle.write_unwritten()
            _fsync_all(handle.fds())
            handle.close()
        elif self.fsync_interval_s <= 0:
            handle.write_unwritten()
            _fsync_all(handle.fds())
        else:
            self._write_later(handle)
            self._schedule_sync(agent_id)
        return full

    def _write_later(self, handle: _AgentFile) -> None:
        if len(handle.unwritten) >= MAX_UNWRITTEN:
            self._write(handle)
        elif len(handle.unwritten) == 1:
            if not self._waiting:
                asyncio.get_running_loop().call_soon(self._write_waiting)
            self._waiting.append(handle)

    def _write_waiting(self) -> None:
        waiting, self._waiting = self._waiting, []
        for handle in waiting:
            self._write(handle)

    def _write(self, handle: _AgentFile) -> None:
        try:
            handle.write_unwritten()
        except OSError:
            # Clients already had their answers: the loss must be loud, the sidecar goes on.
            log.exception("audit write failed; records were lost")

    def _schedule_sync(self, agent_id: str) -> None:
        self._dirty.add(agent_id)
        if self._syncer is None:
            self._wake = asyncio.Event()
            self._syncer = asyncio.create_task(self._sync_loop())
        assert self._wake is not None
        self._wake.set()

    async def _sync_loop(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.fsync_interval_s)
            self._wake.clear()
            await self._sync_dirty()

    async def _sync_dirty(self) -> None:
        dirty, self._dirty = self._dirty, set()
        fds = [fd for agent in dirty if agent in self._files for fd in self._files[agent].fds()]
        if fds:
            await asyncio.to_thread(_fsync_all, fds)

    async def close(self) -> None:
        """Flush everything to disk and close the files (records appended so far are kept)."""
        self._closed = True
        self._write_waiting()
        if self._syncer is not None:
            self._syncer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._syncer
            self._syncer = None
        _fsync_all([fd for handle in self._files.values() for fd in handle.fds()])
        for handle in self._files.values():
            handle.close()
        self._files.clear()


def _fsync_all(fds: list[int]) -> None:
    for fd in fds:
        os.fsync(fd)
