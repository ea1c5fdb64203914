"""The provider-neutral view of a mediated conversation.

Runner messages stay in their provider shape (they are never rewritten, only read); what the
engine decides on — tool calls, results, usage, tool choice — is neutral. Each message also gets
a semantic fingerprint so a conversation can be recognised when the runner sends it back.

One managed tool call as the sidecar runs it, in both modes: the call its one argument check
admits (:class:`CheckedCall`) and the outcome it ends in (:class:`ToolOutcome`), as the model
sees it and as the audit records it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import orjson

from ..manifest import Effect, ManagedTool
from .canonical import digest


@dataclass(frozen=True, slots=True)
class CheckedCall:
    """A tool call whose arguments passed its tool's input schema: what the one argument check
    (``execution/executor.py``) makes, and what the engine, the gate and the executor read
    without checking again (issue 23: each mediated call was checked three times)."""

    tool: ManagedTool
    arguments: dict[str, Any]
    """Parsed and checked against ``tool.input_schema``; read-only from here on."""
    canonical: bytes
    """Canonical JSON of ``arguments``: the key of duplicates, approvals and Idempotency-Key."""
    effect: Effect
    """``tool.effect``: what running it does (the build's, decided by clawc)."""
    call_id: str = ""
    """The model's call id (mediated) or the JSON-RPC id (MCP)."""

    @property
    def args_digest(self) -> str:
        """What an approval names the arguments by (SPEC §9.3)."""
        return digest(self.canonical.decode())


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    envelope: dict[str, Any]
    """Exactly what the model sees: ``{"ok": true, "status", "data"}`` or
    ``{"ok": false, "error": {"code", "message"}, "status"}``, plus ``truncated`` and
    ``original_bytes`` when the service's body was cut."""
    error_code: str | None
    status: int | None
    """The service's HTTP status; None when the service was not reached."""
    executed: bool
    """True iff a request was sent to the service."""
    latency_ms: float
    truncated: bool = False
    original_bytes: int | None = None

    @property
    def ok(self) -> bool:
        return self.error_code is None

    def envelope_json(self) -> str:
        return orjson.dumps(self.envelope).decode()


def error_envelope(code: str, message: str, status: int | None = None) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message}, "status": status}


def refused(code: str, message: str) -> ToolOutcome:
    """An outcome for a call the sidecar will not run (nothing is sent to any service)."""
    return ToolOutcome(
        envelope=error_envelope(code, message),
        error_code=code,
        status=None,
        executed=False,
        latency_ms=0.0,
    )


def invalid_arguments(message: str, started: float | None = None) -> ToolOutcome:
    return ToolOutcome(
        envelope=error_envelope("invalid_arguments", message),
        error_code="invalid_arguments",
        status=None,
        executed=False,
        latency_ms=0.0 if started is None else (time.perf_counter() - started) * 1000,
    )


def answered(
    envelope: dict[str, Any],
    code: str | None,
    status: int | None,
    latency_ms: float,
    original_bytes: int,
    truncated: bool,
) -> ToolOutcome:
    """The outcome of a call its service answered; an answer cut to the result limit says so
    in the envelope the model sees."""
    if truncated:
        envelope["truncated"] = True
        envelope["original_bytes"] = original_bytes
    return ToolOutcome(
        envelope=envelope,
        error_code=code,
        status=status,
        executed=True,
        latency_ms=latency_ms,
        truncated=truncated,
        original_bytes=original_bytes if truncated else None,
    )


ChoiceMode = Literal["auto", "none", "required", "named", "other"]


class CodecError(ValueError):
    """The client's request (or the upstream's reply) is not valid for its protocol."""


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str | dict[str, Any] | None
    """Raw JSON text as the model wrote it (OpenAI) or the parsed input (Anthropic)."""


@dataclass(slots=True)
class ModelTurn:
    """One upstream response: the tool calls the engine acts on, the body kept whole."""

    calls: list[ToolCall]
    usage: dict[str, Any]
    body: dict[str, Any]


@dataclass(slots=True)
class ToolResult:
    call: ToolCall
    outcome: ToolOutcome


@dataclass(slots=True)
class ToolChoice:
    mode: ChoiceMode | None
    """None when the client sent no tool_choice at all."""
    name: str | None = None
    raw: Any = None
    """The client's value, for modes the engine does not reinterpret."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Provider flags carried inside tool_choice (Anthropic disable_parallel_tool_use)."""
    allowed: list[str] | None = None
    """Function names the choice restricts the model to (OpenAI ``allowed_tools``), in the
    client's order; None when it restricts nothing."""


@dataclass(slots=True)
class ToolSpec:
    """A managed tool as offered to the model in one request."""

    name: str
    description: str
    schema: dict[str, Any]
    deferred: bool = False
    """Sent for the provider's own tool search to load (SPEC §23): only where the codec says
    the request carries that search (``Codec.searches_natively``)."""


# A conversation resends its whole history with every request, and an agent its system prompt:
# each turn's fingerprint is remembered by the turn's JSON (a few hundred instructions where
# fingerprinting it costs tens of thousands, and a system prompt of tens of KB a tenth of a
# millisecond), within a bound on the bytes those keys hold. Bigger turns are not kept. Shared
# by every agent (a fingerprint is a digest of the turn alone): what a hit saves is microseconds
# (half a millisecond for a turn of tens of KB) inside a request that waits on its model.
REMEMBERED_BYTES = 2 * 1024 * 1024
REMEMBERED_TURN_BYTES = 256 * 1024


class RememberedFingerprints:
    """Fingerprints of turns seen lately, each under its fingerprint function and JSON, the
    oldest forgotten first past ``limit`` bytes of JSON."""

    def __init__(self, limit: int = REMEMBERED_BYTES) -> None:
        self.limit = limit
        self.held = 0  # bytes of JSON the keys hold
        self._found: dict[tuple[Callable[[dict[str, Any]], str], bytes], str] = {}

    def __call__(self, fingerprint: Callable[[dict[str, Any]], str], turn: dict[str, Any]) -> str:
        try:
            key = (fingerprint, orjson.dumps(turn))
        except TypeError:  # an integer beyond 64 bits: fingerprinted, not kept
            return fingerprint(turn)
        found = self._found.get(key)
        if found is None:
            found = fingerprint(turn)
            if len(key[1]) <= REMEMBERED_TURN_BYTES:
                self._keep(key, found)
        return found

    def __len__(self) -> int:
        return len(self._found)

    def _keep(self, key: tuple[Callable[[dict[str, Any]], str], bytes], found: str) -> None:
        self._found[key] = found
        self.held += len(key[1])
        while self.held > self.limit:
            oldest = next(iter(self._found))
            del self._found[oldest]
            self.held -= len(oldest[1])


remembered = RememberedFingerprints()


FINGERPRINT_SLICE = 256
"""Turns fingerprinted per step of :meth:`Fingerprints.in_slices`: a few milliseconds."""


class Fingerprints(Sequence[str]):
    """The fingerprints of a conversation's turns, each computed the first time it is read.

    Continuity reads those of the turns that are not system prompts; only the journal's
    identity of a request (an agent with side effects) reads every one. A runner's system
    prompt of tens of KB costs a tenth of a millisecond and more to fingerprint: a turn an
    earlier request carried too is not fingerprinted again (``remembered``)."""

    __slots__ = ("_fingerprint", "_known", "_messages")

    def __init__(
        self, messages: list[dict[str, Any]], fingerprint: Callable[[dict[str, Any]], str]
    ) -> None:
        self._messages = messages
        self._fingerprint = fingerprint
        self._known: list[str | None] = [None] * len(messages)

    def __len__(self) -> int:
        return len(self._known)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        known = self._known[index]
        if known is None:
            known = self._known[index] = remembered(self._fingerprint, self._messages[index])
        return known

    def __iter__(self) -> Iterator[str]:
        return map(self.__getitem__, range(len(self)))

    def in_slices(self) -> Iterator[None]:
        """Every fingerprint computed ahead of its reading, ``FINGERPRINT_SLICE`` turns per
        step: the driver gives the event loop to other requests between steps, so a long
        conversation does not hold it for the whole (issue 46). None for a short one."""
        if len(self) <= FINGERPRINT_SLICE:
            return  # computed as they are read: a few milliseconds at most
        for index in range(len(self)):
            self[index]
            if index % FINGERPRINT_SLICE == FINGERPRINT_SLICE - 1:
                yield

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Fingerprints({list(self)!r})"


def _no_seed() -> str:
    return ""


@dataclass(slots=True)
class Conversation:
    """A parsed client request."""

    params: dict[str, Any]
    """Every request field the engine does not own, passed upstream untouched."""
    messages: list[dict[str, Any]]
    fingerprints: Sequence[str]
    roles: list[str]
    tools: list[dict[str, Any]]
    runner_tool_names: set[str]
    tool_choice: ToolChoice
    stream: bool
    include_usage: bool
    legacy_functions: bool = False
    seed_of: Callable[[], str] = _no_seed
    """How :attr:`seed` is computed, when first read (Anthropic's top-level system, Responses'
    instructions: only the journal reads it)."""
    _seed: str | None = field(default=None, init=False, repr=False)

    @property
    def seed(self) -> str:
        """Fingerprint of what precedes the messages."""
        if self._seed is None:
            self._seed = self.seed_of()
        return self._seed
