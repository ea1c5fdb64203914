"""The audit log: the one shape of a record, its keyed chain, and the append-only files.

One shape serves every client request, mediated, passed through or MCP: the request, its
usage, and each tool call of its ``tool_trace`` (``request_record``, ``usage_record``,
``trace_call``). Records are hash-chained, one JSON line per record, one file per agent.

Every record carries ``prev`` (the ``hash`` of the record before it, 64 zeros for the first)
and ``hash`` (HMAC-SHA256 under ``CLAW_AUDIT_KEY`` of the record's canonical JSON without
``hash``; keyed records say ``"mac": "hmac-sha256"``; without a key, plain SHA-256). Editing,
deleting or reordering lines breaks the chain; ``clawc audit verify`` finds where. A chain alone
cannot show that records were cut from its end, so beside each log ``<agent>.head`` holds the
hash of its last record (and, keyed, a MAC of it): verify checks the log still ends there, a
sidecar that starts on a log cut short marks its next record with ``audit_gap`` so the cut stays
on record, and one that finds a non-empty log without its head refuses to start. Every agent of
the build gets its (empty) log and head at start, so a deleted pair is noticed too. Every string
of a record is bounded, so a caller cannot grow the log at will (a 4 MB tool name or JSON-RPC
id would otherwise be written in full on every request): a long string keeps its first
``MAX_STRING_BYTES`` bytes and a SHA-256 of the rest, so the operator can still tell values
apart and check a suspected value. Tool arguments are exempt: ``trace_call`` already bounds
that copy as a whole.

With a key, rewriting the chain consistently after an edit (recomputing every hash) needs the
key; without one, anyone who can write the file can. The head names the last record and, when
keyed, carries a MAC of that name, so a log cut short cannot be given a matching head either.

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
import functools
import hashlib
import hmac
import json
import logging
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..manifest import ManagedTool
from ..model.conversation import ToolOutcome
from ..model.end_user import AuthKind, EndUser
from ..model.env_names import AUDIT_KEY_ENV
from ..observability.logs import rfc3339_now

# Arguments are kept for the operator, but a runaway model must not bloat the log.
MAX_ARGUMENT_BYTES = 64 * 1024


def usage_record(
    input_tokens: int = 0,
    output_tokens: int = 0,
    rounds: int = 0,
    *,
    cache_read: int = 0,
    cache_creation: int = 0,
) -> dict[str, int]:
    """Token usage of a request; cached input (read from, or written to, the provider's prompt
    cache) appears when there was any."""
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens, "rounds": rounds}
    if cache_read:
        usage["cache_read_input_tokens"] = cache_read
    if cache_creation:
        usage["cache_creation_input_tokens"] = cache_creation
    return usage


def request_record(
    *,
    record_id: str,
    route: str,
    mode: str,
    http_status: int,
    stream: bool,
    error_code: str | None = None,
    model: str | None = None,
    provider: str | None = None,
    usage: dict[str, int] | None = None,
    tool_trace: list[dict[str, Any]] | None = None,
    time: str | None = None,
    trace_id: str | None = None,
    end_user: EndUser | None = None,
    auth: AuthKind | None = None,
) -> dict[str, Any]:
    """A request's record before the log chains it (the log adds agent, prev and hash, and the
    time when none is given). ``end_user``: who the request was for (SPEC §21), by the subject
    the pod's end-user claim names; never the token. ``auth``: how the agent proved who it is
    (``"jwt"`` or its static ``"token"``), for a pod with ``identity``."""
    record: dict[str, Any] = {
        "id": record_id,
        "time": time,
        "route": route,
        "mode": mode,
        "model": model,
        "provider": provider,
        "outcome": {"status": "ok" if error_code is None else "error", "code": error_code},
        "http_status": http_status,
        "stream": stream,
        "usage": usage or usage_record(),
        "tool_trace": tool_trace or [],
    }
    if time is None:
        del record["time"]  # the log sets it
    if trace_id is not None:
        record["trace_id"] = trace_id  # the OpenTelemetry trace this request belongs to
    if end_user is not None:
        record["end_user"] = end_user.subject
    if auth is not None:
        record["auth"] = auth
    return record


def trace_call(
    call_id: str,
    tool: ManagedTool | None,
    presented: str,
    arguments: Any,
    outcome: ToolOutcome,
) -> dict[str, Any]:
    """One call entry of ``tool_trace``, built the same way in mediated mode and over MCP."""
    return {
        "id": call_id,
        "name": tool.name if tool is not None else None,
        "presented": presented,
        "arguments": _readable(arguments),
        "executed": outcome.executed,
        "status": outcome.status,
        "error_code": outcome.error_code,
        "latency_ms": round(outcome.latency_ms, 3),
        "truncated": outcome.truncated,
        "original_bytes": outcome.original_bytes,
    }


def _readable(arguments: Any) -> Any:
    """Arguments as a JSON value when they parse, else the raw text the model sent; either is
    replaced by a cut JSON text when it exceeds MAX_ARGUMENT_BYTES."""
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return _cut_arguments(arguments)
    try:
        text = orjson.dumps(arguments)
    except TypeError:
        return arguments  # not JSON-native (huge integers); the log stores it as text
    if len(text) <= MAX_ARGUMENT_BYTES:
        return arguments
    return _cut_arguments(text.decode())


def _cut_arguments(text: str) -> str:
    if len(text.encode()) <= MAX_ARGUMENT_BYTES:
        return text
    cut = text.encode()[:MAX_ARGUMENT_BYTES].decode("utf-8", "ignore")
    return f"{cut}... (cut, {len(text.encode())} bytes)"


GENESIS = "0" * 64
# A short key can be guessed offline from one record; 16 bytes is the HMAC minimum we accept.
MIN_KEY_BYTES = 16
KEYED = "hmac-sha256"
_HEAD_LABEL = b"claw-audit-head\x00"


class AuditKeyError(ValueError):
    """The configured audit key cannot be used."""


def audit_key(env: Mapping[str, str], name: str = AUDIT_KEY_ENV) -> bytes | None:
    """The audit key from ``env[name]``; None when unset or empty."""
    value = env.get(name)
    if not value:
        return None
    key = value.encode()
    if len(key) < MIN_KEY_BYTES:
        raise AuditKeyError(
            f"{name} is too short: use at least {MIN_KEY_BYTES} bytes "
            "(for example the output of `openssl rand -hex 32`)"
        )
    return key


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


def digest(canonical: bytes, key: bytes | None) -> str:
    if key is None:
        return hashlib.sha256(canonical).hexdigest()
    return _mac(key, canonical)


def _mac(key: bytes, message: bytes) -> str:
    """HMAC-SHA256 of ``message`` from a copy of the key's own HMAC: the key's padded blocks
    are hashed once per key, not once per record (2.0 -> 1.3 us a record)."""
    mac = _keyed(key).copy()
    mac.update(message)
    return mac.hexdigest()


@functools.lru_cache(maxsize=8)
def _keyed(key: bytes) -> hmac.HMAC:
    # The digest named, not passed as hashlib.sha256: OpenSSL need not map a function to it.
    return hmac.new(key, digestmod="sha256")


def record_hash(record: dict[str, Any], key: bytes | None = None) -> str:
    return digest(canonical_json(record), key)


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str), parse_int=_int_or_text)


def _int_or_text(text: str) -> int | str:
    number = int(text)
    return number if -(2**63) <= number < 2**64 else text


# --- the head file ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Head:
    last: str  # the hash of the last record written (GENESIS for an empty log)
    mac: str | None  # present when the head was written with a key

    def valid_for(self, key: bytes | None) -> bool:
        if key is None:
            return self.mac is None
        return self.mac is not None and hmac.compare_digest(self.mac, _head_mac(self.last, key))


def head_line(last: str, key: bytes | None) -> bytes:
    """Fixed length for a given key setting, so it can be rewritten in place."""
    if key is None:
        return f"{last}\n".encode()
    return f"{last} {_head_mac(last, key)}\n".encode()


def parse_head(text: str) -> Head | None:
    parts = text.split()
    if len(parts) not in (1, 2) or not all(_is_hex64(part) for part in parts):
        return None
    return Head(parts[0], parts[1] if len(parts) == 2 else None)


def _head_mac(last: str, key: bytes) -> str:
    return _mac(key, _HEAD_LABEL + last.encode())


def _is_hex64(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


log = logging.getLogger(__name__)

# Records of one agent waiting for their write; also how far behind a head may be.
MAX_UNWRITTEN = 64
AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
TAIL_BYTES = 1 << 20
DEFAULT_FSYNC_INTERVAL_S = 0.2
# Fields append() always sets itself; a caller's values for them are dropped.
_RESERVED = frozenset({"agent", "instance", "prev", "hash", "mac"})


def audit_path(state_dir: Path, agent_id: str) -> Path:
    if not AGENT_ID.match(agent_id):
        raise ValueError(f"agent id {agent_id!r} cannot name an audit file")
    return state_dir / "audit" / f"{agent_id}.jsonl"


def head_path(log_path: Path) -> Path:
    return log_path.with_suffix(".head")


class AuditStateError(Exception):
    """The audit state on disk cannot be continued (a log without its head, a forged head)."""


def read_head(log_path: Path) -> Head | None:
    """The head the sidecar wrote beside ``log_path``; None when it is missing or unreadable."""
    try:
        text = head_path(log_path).read_text(encoding="ascii")
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    return parse_head(text)


def startup_problem(log_path: Path, key: bytes | None) -> str | None:
    """Why a sidecar must not continue this log: records without a head (the head was deleted,
    perhaps with records cut from the end), or a head this key did not write."""
    head = read_head(log_path)
    try:
        has_records = log_path.stat().st_size > 0
    except FileNotFoundError:
        has_records = False
    if head is None:
        if has_records:
            return f"{log_path.name} has records but its head {head_path(log_path).name} is missing"
        return None
    if not head.valid_for(key):
        kind = "without a key" if head.mac is None else "with another key (or forged)"
        return f"{head_path(log_path).name} was written {kind}"
    return None


def now_rfc3339() -> str:
    return rfc3339_now()


class _AgentFile:
    def __init__(self, path: Path, key: bytes | None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.key = key
        self.prev, recent, self.torn = _resume(path)
        head = read_head(path)
        self.gap = _gap(head, recent, self.prev)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.head_fd = os.open(head_path(path), os.O_WRONLY | os.O_CREAT, 0o600)
        self.unwritten: list[bytes] = []
        if head is None and self.prev == GENESIS:
            # A new log gets its head at once: deleting the pair is then noticeable.
            self.write_head(GENESIS)

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
        # Fixed length for one key setting (start-up refuses a head of the other setting),
        # written in place: one syscall, never a partially shorter file.
        os.pwrite(self.head_fd, head_line(record_hash, self.key), 0)

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.head_fd)


def _gap(head: Head | None, recent: frozenset[str], last: str) -> dict[str, Any] | None:
    """What the next record says about records missing from the end, if any are. The head may
    lag one write behind the log (a crash between the two writes), never more."""
    if head is None:
        # Only reachable for an agent first seen after start-up (start-up refuses this case).
        return {"head_missing": True} if last != GENESIS else None
    if head.last in recent:
        return None
    return {"head_was": head.last}


def _resume(path: Path) -> tuple[str, frozenset[str], bool]:
    """The hash to chain the next record to, the hashes of the last ``MAX_UNWRITTEN + 1``
    records (where a head may point; GENESIS too while the log is that short), and whether
    the file ends in a torn line."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return GENESIS, frozenset({GENESIS}), False
    if size == 0:
        return GENESIS, frozenset({GENESIS}), False
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
    last = recent[0] if recent else GENESIS
    if len(recent) <= MAX_UNWRITTEN:
        recent.append(GENESIS)
    return last, frozenset(recent), torn


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
        self,
        state_dir: Path,
        *,
        key: bytes | None = None,
        agents: Iterable[str] = (),
        fsync_interval_s: float = DEFAULT_FSYNC_INTERVAL_S,
        instance: str | None = None,
    ) -> None:
        """Open the logs of ``agents`` now (creating empty logs and heads); raises
        :class:`AuditStateError` when a log in the state dir cannot be continued."""
        self.state_dir = Path(state_dir)
        self.key = key
        self.fsync_interval_s = fsync_interval_s
        self.instance = instance  # the sidecar that wrote a record (SPEC §13.1)
        self._files: dict[str, _AgentFile] = {}
        self._check_existing()
        for agent_id in agents:
            self._files[agent_id] = _AgentFile(audit_path(self.state_dir, agent_id), key)
        self._waiting: list[_AgentFile] = []  # files with lines to write this loop iteration
        self._dirty: set[str] = set()
        self._wake: asyncio.Event | None = None
        self._syncer: asyncio.Task[None] | None = None
        self._closed = False

    def _check_existing(self) -> None:
        logs = sorted((self.state_dir / "audit").glob("*.jsonl"))
        problems = [p for p in (startup_problem(path, self.key) for path in logs) if p]
        if problems:
            raise AuditStateError(
                "the audit log cannot be continued: "
                + "; ".join(problems)
                + ". Verify it with `clawc audit verify`, then move the audit directory aside."
            )

    async def append(self, agent_id: str, record: dict[str, Any]) -> dict[str, Any]:
        """Chain, write and return one record (adds id, time, agent, prev, hash)."""
        return self.append_now(agent_id, record)

    def append_now(self, agent_id: str, record: dict[str, Any]) -> dict[str, Any]:
        """``append`` for a caller on the event loop that need not wait: nothing in it awaits
        (the write is the loop's, at the end of its iteration), and every request's end calls
        it, where a coroutine more is a measurable share."""
        handle = self._files.get(agent_id)
        if handle is None:
            handle = _AgentFile(audit_path(self.state_dir, agent_id), self.key)
            if not self._closed:
                self._files[agent_id] = handle
        if _RESERVED.isdisjoint(record):
            full = dict(record)
        else:
            full = {key: value for key, value in record.items() if key not in _RESERVED}
        full["id"] = record.get("id") or uuid.uuid4().hex
        if "time" not in full:  # (setdefault would read the clock for every record)
            full["time"] = now_rfc3339()
        given = len(full)
        self._add_chain_fields(full, agent_id, handle)
        canonical = canonical_json(full)
        if may_hold_long_strings(canonical):  # checked in C: most records are short strings
            fields = list(full.items())
            full = bounded_record(dict(fields[:given])) | dict(fields[given:])
            canonical = canonical_json(full)
        full["hash"] = record_hash = digest(canonical, self.key)
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

    def _add_chain_fields(self, record: dict[str, Any], agent_id: str, handle: _AgentFile) -> None:
        """What the log adds to a record, after the caller's fields (which alone are bounded)."""
        record["agent"] = agent_id
        if self.instance is not None:
            record["instance"] = self.instance
        record["prev"] = handle.prev
        if self.key is not None:
            record["mac"] = KEYED
        if handle.gap is not None:
            record["audit_gap"] = handle.gap

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


# --- every string of a record bounded ---------------------------------------------------

MAX_STRING_BYTES = 256
# Strings of at most this many characters are never cut (see bounded_string).
_SHORT_CHARS = MAX_STRING_BYTES // 4
# In compact JSON without escapes every string is a quote and a run of bytes without one, at
# least as long as its characters; a run after a closing quote (numbers, punctuation) only
# makes a false "maybe".
_LONG_STRING = re.compile(rb'"[^"]{%d}' % (_SHORT_CHARS + 1))
# Where the bounded argument copy sits: record["tool_trace"][i]["calls"][j]["arguments"].
_TRACE = "tool_trace"


def bounded_record(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with every over-long string (value or key) cut; the same object when none is."""
    changed = False
    result: dict[str, Any] = {}
    for key, value in record.items():
        new_key = bounded_string(key) if isinstance(key, str) else key
        new_value = _bounded_trace(value) if key == _TRACE else _bounded(value)
        changed = changed or new_key is not key or new_value is not value
        result[new_key] = new_value
    return result if changed else record


def may_hold_long_strings(text: bytes) -> bool:
    """False when no string in JSON ``text`` (key or value, at any depth) could be cut: a
    scan in C where ``bounded_record`` calls Python per value, and most records hold only
    short strings. True means "maybe": the walk decides."""
    return b"\\" in text or _LONG_STRING.search(text) is not None


def bounded_string(text: str) -> str:
    # A UTF-8 encoding is never shorter than the number of characters: skip the encode.
    if len(text) <= _SHORT_CHARS:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_STRING_BYTES:
        return text
    kept = data[:MAX_STRING_BYTES].decode("utf-8", "ignore")
    rest = data[len(kept.encode("utf-8", "surrogatepass")) :]
    return f"{kept}...(cut {len(rest)} bytes, sha256 {hashlib.sha256(rest).hexdigest()})"


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return bounded_string(value)
    if isinstance(value, dict):
        return bounded_record(value)
    if isinstance(value, list):
        items = [_bounded(item) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def _bounded_trace(trace: Any) -> Any:
    """A tool trace: rounds of calls; each call's ``arguments`` is kept as trace.py left it."""
    if not isinstance(trace, list):
        return _bounded(trace)
    return [_bounded_round(round_) for round_ in trace]


def _bounded_round(round_: Any) -> Any:
    if not isinstance(round_, dict) or not isinstance(round_.get("calls"), list):
        return _bounded(round_)
    others = bounded_record({k: v for k, v in round_.items() if k != "calls"})
    return {**others, "calls": [_bounded_call(call) for call in round_["calls"]]}


def _bounded_call(call: Any) -> Any:
    if not isinstance(call, dict) or "arguments" not in call:
        return _bounded(call)
    others = bounded_record({k: v for k, v in call.items() if k != "arguments"})
    return {**others, "arguments": call["arguments"]}
