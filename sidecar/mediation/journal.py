"""The per-request journal: a tool call runs once even when the client sends the request again
(SPEC §8.2).

A mediated request is identified by a digest of its agent and its canonical body. While it
runs, its progress is appended to ``<state>/journal/<digest>.jsonl``, each line fsynced before
the sidecar acts on it:

- ``{"turn": body}`` — a model reply that led to tool calls (written before they execute);
  nothing is written before the first round with a call that is neither read-only nor
  idempotent (running those again is harmless), so a request that only reads costs no I/O;
- ``{"sent": key}`` — a call of a tool that is neither read-only nor idempotent, before it is
  sent;
- ``{"result": key, "outcome": ...}`` — a call answered by its service.

A request that ends with a successful answer, or without having executed any call, deletes its
journal: a successful attempt is never replayed. Any other ending (an error answer, a timeout,
a client that left, a killed process) leaves it, and an identical request within the retry
window resumes it: the journaled turns are replayed instead of calling the model, answered
calls reuse their journaled outcome, and a destructive call that was sent but never answered
is not sent again (its outcome is unknown, and the model is told so). Journals older than the
window are pruned.

Two identical requests at once: the second waits until the first has ended, then resumes it
if it failed, or runs as a new request if it succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from clawpod.sidecar.manifest import ManagedTool
from clawpod.sidecar.model.canonical import canonical_arguments, canonical_json, digest
from clawpod.sidecar.model.conversation import ToolCall
from clawpod.sidecar.model.outcome import ToolOutcome, refused

log = logging.getLogger("sidecar.journal")

DIRECTORY = "journal"
SUFFIX = ".jsonl"
DEFAULT_MAX_JOURNALS = 10000
OUTCOME_UNKNOWN = (
    "this call was sent to the service by an earlier attempt of this request that ended "
    "before the answer arrived; it is not sent again. Check its effect before repeating it."
)


def request_digest(agent: str, body: dict[str, Any]) -> str:
    """Identical retries of one request share this: the agent and the body, canonically."""
    return digest(agent, canonical_json(body).decode())


def call_key(tool: ManagedTool, call: ToolCall) -> str:
    """One call of one request: replayed turns give a resumed call the same key."""
    return digest(tool.name, call.id, canonical_arguments(call.arguments))


def has_side_effects(tool: ManagedTool) -> bool:
    return not (tool.read_only or tool.idempotent)


@dataclass(slots=True)
class _Journaled:
    """What an earlier attempt left."""

    attempt: str
    turns: list[dict[str, Any]]
    results: dict[str, ToolOutcome]
    sent: set[str]


class RequestJournal:
    def __init__(
        self,
        state_dir: Path,
        *,
        window_ms: int,
        max_journals: int = DEFAULT_MAX_JOURNALS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = Path(state_dir) / DIRECTORY
        self.window_s = window_ms / 1000
        self.max_journals = max_journals
        self._clock = clock
        self._running: dict[str, asyncio.Future[None]] = {}
        self._pruned_at = float("-inf")

    async def begin(self, request: str, attempt: str) -> Attempt:
        """Start attempt ``attempt`` of the request with digest ``request``: after any identical
        attempt still running here has ended, resuming what an unsuccessful one left."""
        while (running := self._running.get(request)) is not None:
            await asyncio.shield(running)
        self._running[request] = asyncio.get_running_loop().create_future()
        try:
            earlier = await asyncio.to_thread(self._prune_and_load, request)
        except OSError as exc:
            # An unreadable journal resumes nothing; its writes fail too, and the driver then
            # sends no destructive call.
            log.warning("request journal unavailable: %s", exc)
            earlier = None
        except BaseException:
            self._release(request)
            raise
        return Attempt(self, request, attempt, earlier)

    # --- files ------------------------------------------------------------------------------

    def path(self, request: str) -> Path:
        return self.directory / (request + SUFFIX)

    def _prune_and_load(self, request: str) -> _Journaled | None:
        self._prune_if_due()
        return self._load(request)

    def _load(self, request: str) -> _Journaled | None:
        path = self.path(request)
        try:
            age = self._clock() - path.stat().st_mtime
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if age > self.window_s:
            path.unlink(missing_ok=True)
            return None
        journaled = _Journaled("", [], {}, set())
        for line in data.splitlines():
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line torn by a crash: its call was not answered
            if "attempt" in record:
                journaled.attempt = record["attempt"]
            elif "turn" in record:
                journaled.turns.append(record["turn"])
            elif "sent" in record:
                journaled.sent.add(record["sent"])
            elif "result" in record:
                journaled.results[record["result"]] = ToolOutcome(**record["outcome"])
        if not journaled.results and not journaled.sent:
            return None  # nothing ran: a fresh attempt is the same thing
        return journaled

    def _open(self, request: str, *, fresh: bool) -> int:
        """The journal's descriptor for appending (a fresh attempt starts a new file)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_TRUNC if fresh else 0)
        fd = os.open(self.path(request), flags, 0o600)
        _fsync_directory(self.directory)  # the file itself survives a crash
        return fd

    def _prune_if_due(self) -> None:
        """Drop journals older than the window; keep at most ``max_journals`` (the newest)."""
        now = self._clock()
        if now - self._pruned_at < self.window_s / 10:
            return
        self._pruned_at = now
        try:
            entries = [(e.stat().st_mtime, e) for e in os.scandir(self.directory)]
        except FileNotFoundError:
            return
        entries.sort(key=lambda entry: entry[0], reverse=True)
        for position, (mtime, entry) in enumerate(entries):
            if position >= self.max_journals or now - mtime > self.window_s:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)

    def _release(self, request: str) -> None:
        running = self._running.pop(request, None)
        if running is not None and not running.done():
            running.set_result(None)


@dataclass(slots=True)
class Attempt:
    """One attempt of a request, as the driver of the mediation loop sees the journal.

    Records are buffered and written with one fsync at the two points where they must be
    durable: before a call with side effects is sent (the turns that asked for it and its
    ``sent`` line), and before a journaled result is used (the next model call, the end).
    A result lost in between leaves its call ``sent`` and unanswered: not sent again."""

    journal: RequestJournal
    request: str
    attempt: str
    earlier: _Journaled | None
    _replayed: int = 0
    _pending_turns: list[dict[str, Any]] = field(default_factory=list)
    _buffer: list[bytes] = field(default_factory=list)
    _fd: int | None = None
    _started: bool = False
    _ended: bool = False

    @property
    def resumed_from(self) -> str | None:
        return self.earlier.attempt if self.earlier is not None else None

    def replayed_turn(self) -> dict[str, Any] | None:
        """The model reply an earlier attempt got at this point, if it journaled one."""
        if self.earlier is None or self._replayed >= len(self.earlier.turns):
            return None
        self._replayed += 1
        return self.earlier.turns[self._replayed - 1]

    def model_replied(self, body: dict[str, Any]) -> None:
        """A new model reply: journaled before any call it asks for with side effects."""
        self._pending_turns.append(body)

    def before_execution(self, side_effects: bool) -> None:
        """Queue the turns that led here. Until a round has a call with side effects nothing
        is journaled: read-only and idempotent calls are safe to run again, and a request that
        only reads never touches the disk."""
        if not (self._started or side_effects):
            return
        if not self._started:
            self._started = True
            self._queue({"attempt": self.attempt})
        for body in self._pending_turns:
            self._queue({"turn": body})
        self._pending_turns.clear()

    def known_outcome(self, key: str) -> ToolOutcome | None:
        """The journaled outcome of an answered call, or a refusal for a destructive call sent
        and never answered; None when the call has to run."""
        if self.earlier is None:
            return None
        if key in self.earlier.results:
            return self.earlier.results[key]
        if key in self.earlier.sent:
            return refused("outcome_unknown", OUTCOME_UNKNOWN)
        return None

    async def sending(self, key: str) -> None:
        """Durably record that this call is about to be sent (raises OSError if it cannot)."""
        self._queue({"sent": key})
        await self.flush()

    def answered(self, key: str, outcome: ToolOutcome) -> None:
        if self._started:  # a read-only round before any side effect: see before_execution
            self._queue({"result": key, "outcome": dataclasses.asdict(outcome)})

    async def flush(self) -> None:
        if not self._buffer:
            return
        data, self._buffer = b"".join(self._buffer), []
        await asyncio.to_thread(self._write, data)

    async def end(self, *, succeeded: bool) -> None:
        """A successful attempt is never replayed; one that executed nothing has nothing to
        resume. Either way its journal goes; otherwise it stays for the retry window."""
        if self._ended:
            return
        self._ended = True
        try:
            if succeeded or not (self._started or self.earlier is not None):
                self._buffer.clear()
                if self._started or self.earlier is not None:
                    await asyncio.to_thread(self.journal.path(self.request).unlink, True)
            else:
                await self.flush()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self.journal._release(self.request)

    def _queue(self, record: dict[str, Any]) -> None:
        self._buffer.append(orjson.dumps(record) + b"\n")

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            self._fd = self.journal._open(self.request, fresh=self.earlier is None)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
