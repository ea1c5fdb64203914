"""The per-request journal: a tool call runs once even when the client sends the request again
(SPEC §8.2).

A mediated request is identified by its conversation, not its bytes (:func:`request_identity`):
the agent, the canonical turns (roles, contents, tool calls and results in order, with
whitespace, text-block joins, id punctuation and string/parts re-serialisation normalised by
the codecs' fingerprints) and the tools the runner declared. ``stream``, ``stream_options``,
sampling parameters, ``max_tokens``, ``metadata``, ``user`` and headers are not part of it: a
runner that retries with ``stream: false`` after a failed stream (Claude Code) sends the same
request. While it runs, its progress is appended to the journal log (:mod:`.journal_log`: one
append-only log for the pod, its lines naming the agent and the identity):

- ``{"turn": body}`` — a model reply that led to tool calls (synced before they execute);
  nothing is written before the first round with a call that is neither read-only nor
  idempotent (running those again is harmless), so a request that only reads costs no I/O;
- ``{"sent": key}`` — a call of a tool that is neither read-only nor idempotent, synced before
  it is sent;
- ``{"backend_task": id, "call": key}`` — such a call its MCP service runs as a task (SPEC
  §22), synced before the task is polled: a retry after a crash polls that task for the
  outcome instead of reporting it unknown;
- ``{"result": key, "outcome": ...}`` — a call answered by its service, synced before the next
  model call carries it (SPEC §8.2); a result a crash took before that leaves the call sent
  and unanswered, so a retry does not send it again and tells the model its outcome is unknown.

A request that ends with a successful answer, or without having executed any call, drops its
journal: a successful attempt is never replayed. Any other ending (an error answer, a timeout,
a client that left, a killed process) leaves it, and an identical request within the retry
window resumes it: the journaled turns are replayed instead of calling the model, answered
calls reuse their journaled outcome, and a destructive call that was sent but never answered
is not sent again (its outcome is unknown, and the model is told so). Journals older than the
window are pruned; a journal inside the window is never pruned for room.

A re-rendered retry (OpenClaw 2026.9.6 re-renders the user's prompt with a new timestamp, a
"queued message" preamble, a "continue the current task" paragraph, and keeps appending its
runtime line and an internal-context user message): a failed attempt also leaves a link under
the identity of its history *before its trailing user block* (every user turn since the last
assistant or tool turn), with that block's content (:func:`asked_content`: its lines without
the runners' decorations). The next request of the same agent inside the window with that same
history, no journal of its own and the same content in its trailing user block (a
"continue" line the failed attempt did not have being a decoration too) adopts the failed
attempt's journal: its executed rounds come after the new trailing block, so the model sees
the order placed and its result and nothing is sent again. The link is used once. Other
content never adopts. A new session sending the same prompt inside the window is taken for
the retry: the safe direction (the model is shown the first order first; an identical second
order in the same request is refused as a duplicate, docs/contract.md §8.2).

Each agent has its own quota of journals (the pod's bound divided by its agents): an agent
whose own failures fill it gets its destructive calls refused (``state_unavailable``) until
its journals age out; it can never make another agent's journal go.

Two identical requests at once: the second waits until the first has ended, then resumes it
if it failed, or runs as a new request if it succeeded.

A request with no journal and no link of its own (the common case) begins with a look into the
log's index in memory, without a thread hop; reading and deleting segments run off the loop.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..manifest import ManagedTool
from ..model.canonical import (
    canonical_arguments,
    canonical_json,
    digest,
    normalise_text,
)
from ..model.conversation import Conversation, ToolCall, ToolOutcome, refused
from .journal_log import JournalLog, Key, Link, line

log = logging.getLogger(__name__)

DIRECTORY = "journal"
# How much of a failed attempt's trailing user content its link keeps to compare a rewrite with.
MAX_ASKED = 4096
# Refusals of calls never sent that a retry may well get past (an approval still pending when
# the sidecar stopped, or when the request's tool budget ran out): not journaled as answers.
RETRYABLE_UNSENT = frozenset({"approval_pending"})
DEFAULT_MAX_JOURNALS = 10000
OUTCOME_UNKNOWN = (
    "this call was sent to the service by an earlier attempt of this request that ended "
    "before the answer arrived; it is not sent again. Check its effect before repeating it."
)


def identities(
    agent: str, api: str, conversation: Conversation | None, body: dict[str, Any]
) -> tuple[str, Rewrite | None]:
    """What :meth:`RequestJournal.begin` takes of a request: its identity, and what a rewritten
    retry of it is recognised by (None for a body the codec could not read, which is identified
    by its bytes alone). The turns and tools are read once for both (every message
    fingerprinted is most of a journaled request's identity)."""
    if conversation is None:
        return request_digest(agent, body), None
    parts = _Identifying(agent, api, conversation)
    return parts.request(), Rewrite(lambda: (parts.history(), asked_content(conversation)))


class Rewrite:
    """What recognises a rewritten retry (a failed attempt's link, above): the identity of the
    request's history before its trailing user block (None without one) and that block's
    content (:func:`asked_content`).
    Computed when first read: only a request of an agent with a link to adopt, or one whose
    attempt fails, reads them, and most requests do neither (together they cost about as much
    as the request's identity)."""

    __slots__ = ("_compute", "_found")

    def __init__(self, compute: Callable[[], tuple[str | None, str]]) -> None:
        self._compute = compute
        self._found: tuple[str | None, str] | None = None

    @classmethod
    def known(cls, history: str | None, asked: str) -> Rewrite:
        return cls(lambda: (history, asked))

    @property
    def history(self) -> str | None:
        return self._read()[0]

    @property
    def asked(self) -> str:
        return self._read()[1]

    def _read(self) -> tuple[str | None, str]:
        if self._found is None:
            self._found = self._compute()
        return self._found


def request_digest(agent: str, body: dict[str, Any]) -> str:
    """A body the codec cannot read: its bytes, canonically, are all there is to go by."""
    return digest(agent, canonical_json(body).decode())


def request_identity(agent: str, api: str, conversation: Conversation) -> str:
    """Retries of one request share this: the agent, the conversation's turns as the codec
    fingerprints them, and the tools the runner declared (not sampling or transport fields)."""
    return _Identifying(agent, api, conversation).request()


class _Identifying:
    """What both identities of a request are digests of."""

    def __init__(self, agent: str, api: str, conversation: Conversation) -> None:
        self.head = (agent, api, conversation.seed)
        self.tools = canonical_json(sorted(conversation.runner_tool_names)).decode()
        self.roles = conversation.roles
        self.turns = [
            f"{role}:{fingerprint}"
            for role, fingerprint in zip(conversation.roles, conversation.fingerprints, strict=True)
        ]

    def request(self) -> str:
        return digest(*self.head, self.tools, *self.turns)

    def history(self) -> str | None:
        """The identity of the conversation before its trailing user block (None without
        one): what a runner that re-renders that block keeps the same between retries."""
        start = trailing_user_block(self.roles)
        if start is None:
            return None
        return digest("history", *self.head, self.tools, *self.turns[:start])


def trailing_user_block(roles: list[str]) -> int | None:
    """Where the user turns after the last assistant or tool turn begin (None if the
    conversation does not end with one)."""
    start = len(roles)
    while start > 0 and roles[start - 1] == "user":
        start -= 1
    return start if start < len(roles) else None


# Runner decorations, never content (docs/contract.md §8.2): blocks a runner appends to every
# request (OpenClaw's internal context, Claude Code's reminders) ...
_APPENDED_BLOCK = re.compile(
    r"<<<BEGIN_([A-Z_]+)>>>.*?<<<END_\1>>>|<system-reminder>.*?</system-reminder>", re.S
)
# ... a bracketed note before a line's text holding a date or time, or of four words or more
# (OpenClaw: "[Mon 2026-12-07 01:02 UTC]", "[Queued user message from a previous active
# turn; preserved as context only. ...]") ...
_BRACKETED = re.compile(r"\[([^\[\]\n]{1,400})\]\s*")
_TIME = re.compile(r"\d{1,2}:\d{2}|\d{4}-\d{2}-\d{2}")
# ... and a line of runtime facts ("Runtime: agent=main | session=... | os=...").
_RUNTIME = re.compile(r"[A-Z][\w ]{0,40}:\s*[\w.-]+=\S")
# A line asking to continue the interrupted task is a decoration only in a retry (a failed
# attempt's own such line is its content).
_CONTINUE = re.compile(r"continue\b", re.I)


def asked_content(conversation: Conversation) -> str:
    """The trailing user block's content, one line a line, without runner decorations (at
    most MAX_ASKED characters): what a re-rendered retry of it has again."""
    start = trailing_user_block(conversation.roles)
    if start is None:
        return ""
    lines = [line for message in conversation.messages[start:] for line in _content(message)]
    return "\n".join(lines)[:MAX_ASKED]


def retries(asked: str, content: str) -> bool:
    """Whether a request whose trailing user block has ``content`` (:func:`asked_content`)
    retries the failed attempt that asked ``asked``: the same lines, less "continue" lines
    the failed attempt did not have."""
    if not asked:
        return False
    failed = set(asked.split("\n"))
    kept = [line for line in content.split("\n") if line in failed or not _CONTINUE.match(line)]
    return "\n".join(kept)[:MAX_ASKED] == asked


def _content(message: Any) -> list[str]:
    lines = []
    for text in _texts(message):
        for raw in _APPENDED_BLOCK.sub("\n", text).splitlines():
            line = normalise_text(raw)
            while (note := _BRACKETED.match(line)) and _is_note(note.group(1)):
                line = line[note.end() :]
            if line and not _RUNTIME.match(line):
                lines.append(line)
    return lines


def _is_note(inner: str) -> bool:
    return bool(_TIME.search(inner)) or len(inner.split()) >= 4


def _texts(value: Any) -> list[str]:
    """Every text in a turn of any protocol (``content`` strings, parts' and items' ``text``)."""
    if isinstance(value, list):
        return [text for item in value for text in _texts(item)]
    if not isinstance(value, dict):
        return []
    found: list[str] = []
    for key in ("content", "text", "items"):
        inner = value.get(key)
        found += [inner] if isinstance(inner, str) else _texts(inner)
    return found


def has_side_effects(tool: ManagedTool) -> bool:
    """Neither read-only nor idempotent: running it twice is not harmless."""
    return not tool.effect.repeatable


def call_key(tool: ManagedTool, call: ToolCall) -> str:
    """One call of one request: replayed turns give a resumed call the same key."""
    return digest(tool.name, call.id, canonical_arguments(call.arguments))


@dataclass(slots=True)
class _Journaled:
    """What an earlier attempt left."""

    attempt: str
    origin: str
    """The first attempt of the lineage: idempotency keys are derived from it."""
    turns: list[dict[str, Any]]
    results: dict[str, ToolOutcome]
    sent: set[str]
    retried: set[str] = field(default_factory=set)
    """Calls refused unsent for a reason a retry may get past: they run on the retry."""
    backend_tasks: dict[str, str] = field(default_factory=dict)
    """Sent calls their MCP service runs as tasks: the call's key -> the service's task id."""
    records: list[dict[str, Any]] = field(default_factory=list)
    adopted: Key | None = None
    """The journal of another request this one took over (a rewritten retry), else None."""


class JournalQuotaReached(OSError):
    """The agent's own failed attempts fill its share of journals."""


class RequestJournal:
    def __init__(
        self,
        state_dir: Path,
        *,
        window_ms: int,
        agents: int = 1,
        max_journals: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``agents``: how many agents share ``max_journals`` (each gets its own share)."""
        self.directory = Path(state_dir) / DIRECTORY
        self.window_s = window_ms / 1000
        self.agents = max(1, agents)
        self.max_journals = DEFAULT_MAX_JOURNALS if max_journals is None else max_journals
        self._clock = clock
        self._running: dict[Key, deque[asyncio.Future[None]]] = {}
        """Requests with an attempt running here, each with the identical ones waiting."""
        self.log = JournalLog(
            self.directory,
            window_s=self.window_s,
            clock=clock,
            in_flight=lambda: len(self._running),  # what a delayed batch waits for
        )
        self._folders: dict[str, str] = {}  # agent -> its folder name in the log
        self._pruned_at = float("-inf")

    @property
    def agent_quota(self) -> int:
        return max(1, self.max_journals // self.agents)

    async def begin(
        self,
        agent: str,
        request: str,
        attempt: str,
        rewrite: Rewrite | None = None,
    ) -> Attempt:
        """Start attempt ``attempt`` of the request with identity ``request``: after any
        identical attempt still running here has ended, resuming what an unsuccessful one left
        (or, failing that, what a failed attempt with the same history left, when its
        trailing user block has the same content as this one's: ``rewrite``)."""
        if not self.log.is_recovered:
            await self.log.recovered()
        key = (self.folder(agent), request)
        turn = self._queue_up(key)
        if turn is not None:  # an identical attempt runs here
            await self._take_turn(key, turn)
        try:
            if self._prune_due():
                await self._prune()
            # The common request has no journal and reads nothing.
            earlier = await self._load(key) if key in self.log.journals else None
            if earlier is None and rewrite is not None and self.log.links:
                earlier = await self._adopt(key[0], rewrite)
        except OSError as exc:
            # An unreadable journal resumes nothing; its writes fail too, and the driver then
            # sends no destructive call.
            log.warning("request journal unavailable: %s", exc)
            earlier = None
        except BaseException:
            self._release(key)
            raise
        return Attempt(self, key, attempt, earlier, rewrite)

    def folder(self, agent: str) -> str:
        """The agent's name in the log (one digest per agent, not per request)."""
        folder = self._folders.get(agent)
        if folder is None:
            folder = self._folders[agent] = digest("agent", agent)[:32]
        return folder

    def holds(self, agent: str, request: str) -> bool:
        """Whether a journal of this request is kept (for a retry to resume)."""
        return (self.folder(agent), request) in self.log.journals

    def close(self) -> None:
        self.log.close()

    async def _load(self, key: Key) -> _Journaled | None:
        """What the journal ``key`` holds; the common request has none and reads nothing."""
        journal = self.log.journals.get(key)
        if journal is None:
            return None
        if self.log.expired(journal.written_at):
            self.log.drop(key, record=False)
            return None
        spans = sorted(journal.spans)
        earlier = _journaled(await asyncio.to_thread(self.log.read, key, spans))
        if earlier is None:  # nothing ran: the attempt starting now begins it afresh
            self.log.drop(key, record=False)
        return earlier

    async def _adopt(self, folder: str, rewrite: Rewrite) -> _Journaled | None:
        """The failed attempt a link names, when this request's trailing user block has that
        attempt's content; taken over once (the link goes as it is claimed)."""
        if rewrite.history is None:
            return None
        link_key = (folder, rewrite.history)
        link = self.log.links.get(link_key)
        if link is None or not retries(link.asked, rewrite.asked):
            return None
        del self.log.links[link_key]
        target = (link_key[0], link.request)
        earlier = await self._load(target)
        if earlier is not None:
            earlier.adopted = target
        return earlier

    def _admit(self, key: Key) -> None:
        """Count a new journal against its agent's quota (raises JournalQuotaReached)."""
        if self.log.count(key[0]) >= self.agent_quota:
            raise JournalQuotaReached(
                f"the agent's {self.agent_quota} journals of failed requests are all in use"
            )
        self.log.add(key)

    async def _prune(self) -> None:
        """Drop journals (and links) older than the window; nothing inside it goes for room:
        the per-agent quota bounds them instead. Segments nothing needs go off the loop."""
        self._pruned_at = self._clock()
        unneeded = self.log.prune(self._running)
        if unneeded:
            await asyncio.to_thread(self.log.delete_segments, unneeded)

    def _prune_due(self) -> bool:
        return self._clock() - self._pruned_at >= self.window_s / 10

    def _queue_up(self, key: Key) -> asyncio.Future[None] | None:
        """Identical requests run one at a time, in the order they came, each woken alone when
        its turn comes (not all of them at once): None when no identical attempt runs here (it
        runs now), else the future its turn resolves."""
        waiting = self._running.get(key)
        if waiting is None:
            self._running[key] = deque()
            return None
        turn = asyncio.get_running_loop().create_future()
        waiting.append(turn)
        return turn

    async def _take_turn(self, key: Key, turn: asyncio.Future[None]) -> None:
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release(key)  # its turn came as it was cancelled: the next one's now
            raise

    def _release(self, key: Key) -> None:
        waiting = self._running.get(key)
        while waiting:
            turn = waiting.popleft()
            if not turn.done():  # else its request went away while waiting
                turn.set_result(None)
                return
        self._running.pop(key, None)
        self.log.others_may_come()


def _journaled(records: list[dict[str, Any]]) -> _Journaled | None:
    """An earlier attempt's records read back; None when nothing ran (a fresh attempt is the
    same thing)."""
    journaled = _Journaled("", "", [], {}, set(), records=records)
    for record in records:
        if "attempt" in record:
            journaled.attempt = record["attempt"]
            journaled.origin = journaled.origin or record.get("origin") or record["attempt"]
        elif "turn" in record:
            journaled.turns.append(record["turn"])
        elif "sent" in record:
            journaled.sent.add(record["sent"])
        elif "unsent" in record:
            journaled.sent.discard(record["unsent"])
            journaled.retried.add(record["unsent"])
        elif "backend_task" in record:
            journaled.backend_tasks[str(record.get("call"))] = str(record["backend_task"])
        elif "result" in record:
            journaled.results[record["result"]] = ToolOutcome(**record["outcome"])
    if not (journaled.results or journaled.sent or journaled.retried):
        return None
    return journaled


@dataclass(slots=True)
class Attempt:
    """One attempt of a request, as the driver of the mediation loop sees the journal.

    Records are buffered and written with one sync where they must be durable: before a call
    with side effects is sent (the turns that asked for it and its ``sent`` line), before the
    next model call uses a result, and when a failed attempt ends."""

    journal: RequestJournal
    key: Key
    attempt: str
    earlier: _Journaled | None
    rewrite: Rewrite | None = None
    _replayed: int = 0
    _pending_turns: list[dict[str, Any]] = field(default_factory=list)
    _buffer: list[bytes] = field(default_factory=list)
    _admitted: bool = False
    _started: bool = False
    _ended: bool = False

    def __post_init__(self) -> None:
        if self.earlier is not None and self.earlier.adopted is not None:
            # The adopted journal's records become this request's own: a second failure and
            # its retry still know every call the first attempt made.
            self._buffer += [self._line(record) for record in self.earlier.records]

    @property
    def request(self) -> str:
        return self.key[1]

    @property
    def resumed_from(self) -> str | None:
        return self.earlier.attempt if self.earlier is not None else None

    @property
    def lineage(self) -> str:
        """The first attempt of this request: the same on every retry that resumes it."""
        return self.earlier.origin if self.earlier is not None else self.attempt

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
            self._queue({"attempt": self.attempt, "origin": self.lineage})
        for body in self._pending_turns:
            self._queue({"turn": body})
        self._pending_turns.clear()

    def known_outcome(self, key: str) -> ToolOutcome | None:
        """The journaled outcome of an answered call, or a refusal for a destructive call sent
        and never answered (unless its service runs it as a task: :meth:`resumed_task`); None
        when the call has to run."""
        if self.earlier is None:
            return None
        if key in self.earlier.results:
            return self.earlier.results[key]
        if key in self.earlier.sent and key not in self.earlier.backend_tasks:
            return refused("outcome_unknown", OUTCOME_UNKNOWN)
        return None

    def resumed_task(self, key: str) -> str | None:
        """The MCP service's task a call sent and never answered is (SPEC §22): its outcome is
        polled from there, the call never sent again."""
        if self.earlier is None or key in self.earlier.results or key not in self.earlier.sent:
            return None
        return self.earlier.backend_tasks.get(key)

    def task_started(self, key: str, task_id: str) -> Awaitable[None]:
        """Durably record the service's task a sent call became (raises OSError if it cannot)."""
        self._queue({"backend_task": task_id, "call": key})
        return self.flush()

    def sending(self, key: str) -> Awaitable[None]:
        """Durably record that this call is about to be sent (raises OSError if it cannot)."""
        self._queue({"sent": key})
        return self.flush()

    def answered(self, key: str, outcome: ToolOutcome) -> None:
        if not self._started:  # a read-only round before any side effect: see before_execution
            return
        if outcome.error_code in RETRYABLE_UNSENT:
            # Never sent, and a retry may well send it (an approval still pending when the
            # sidecar stopped): a retry runs it instead of reusing this answer.
            self._queue({"unsent": key})
            return
        # orjson writes the dataclass's fields as dataclasses.asdict would, without its deep
        # copy of the result (a tenth of the cost).
        self._queue({"result": key, "outcome": outcome})

    async def flush(self) -> None:
        """Write the queued records durably (OSError if they cannot be)."""
        if not self._buffer:
            return
        self._claim_quota()
        data, self._buffer = b"".join(self._buffer), []
        await self.journal.log.append(self.key, data)

    def _claim_quota(self) -> None:
        """A new journal counts against its agent's quota (an adopted one's place passes to
        the journal that takes its records over; a resumed one has its place)."""
        if self._admitted:
            return
        self._admitted = True
        if self.earlier is None:
            try:
                self.journal._admit(self.key)
            except JournalQuotaReached:
                self._buffer.clear()
                self._admitted = False
                raise
        else:
            self.journal.log.add(self.key)

    def _written(self) -> bool:
        """Whether the log holds records of this request's journal."""
        held = self.journal.log.journals.get(self.key)
        return held is not None and bool(held.segments)

    async def end(self, *, succeeded: bool) -> None:
        """A successful attempt is never replayed; one that executed nothing has nothing to
        resume. Either way its journal goes; otherwise it stays for the retry window, with a
        link from its history for a rewritten retry."""
        if self._ended:
            return
        self._ended = True
        log_ = self.journal.log
        try:
            adopted = self.earlier.adopted if self.earlier is not None else None
            if succeeded or not (self._started or self.earlier is not None):
                self._buffer.clear()
                for key in (self.key, adopted):
                    if key is not None:
                        log_.drop(key)
            else:
                await self._keep(adopted)
        finally:
            self.journal._release(self.key)

    async def _keep(self, adopted: Key | None) -> None:
        """A failed attempt's journal stays, with a link from its history (read now, the
        first time) for a rewritten retry."""
        log_ = self.journal.log
        rewrite = self.rewrite
        history = rewrite.history if rewrite is not None else None
        asked = rewrite.asked if rewrite is not None and history is not None else ""
        if not asked:  # nothing but decorations: no retry could be told from another request
            history = None
        if history is not None and (self._buffer or self._written()):
            self._queue({"link": history, "asked": asked})
        try:
            await self.flush()  # a failed write leaves an adopted journal where it was
        finally:
            if not self._written():  # nothing of it reached the log
                log_.drop(self.key, record=False)
        if adopted is not None:
            # Its records live on in this request's journal, which took its place.
            log_.drop(adopted)
        if history is not None and self._written():
            log_.links[(self.key[0], history)] = Link(self.request, asked, self.journal._clock())

    def _queue(self, record: dict[str, Any]) -> None:
        self._buffer.append(self._line(record))

    def _line(self, record: dict[str, Any]) -> bytes:
        return line(self.key, self.journal._clock(), record)
