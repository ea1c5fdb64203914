"""What the sans-IO engine asks its driver to do, and what the driver reports back.

The engine is a generator: it yields a command, the driver performs the I/O and sends the
matching event back in. ``Respond`` and ``Fail`` end the exchange.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from ..model.client_approval import ClientApproval
from ..model.conversation import CheckedCall, ToolCall, ToolOutcome
from ..model.errors import internal_error
from ..model.taint import UNTAINTED, RequestTaint

# --- commands -------------------------------------------------------------------------------


@dataclass(slots=True)
class BeginStream:
    """Send the 200 text/event-stream headers now; keep the stream alive while waiting."""


@dataclass(slots=True)
class Recall:
    """Look up hidden rounds stored under these continuity keys."""

    keys: list[str]


@dataclass(slots=True)
class CallModel:
    body: dict[str, Any]
    timeout_s: float


@dataclass(slots=True)
class PlannedExecution:
    call: ToolCall
    checked: CheckedCall
    """The call as the argument check made it: the gate and the executor take it as it is."""
    client: ClientApproval | None = None
    """Set when the client can answer approvals itself (SPEC §16), with its answer if any."""


@dataclass(slots=True)
class ExecuteTools:
    """Run these calls against their services; answer with outcomes in the same order."""

    executions: list[PlannedExecution]
    concurrent: bool
    timeout_s: float
    """Per call: timeout_per_tool_ms, already clamped to the request's remaining budget."""
    max_result_bytes: int
    budget_s: float
    """What is left of the request's tool budget: sequential calls stop once it is spent."""
    taint: RequestTaint = UNTAINTED
    """The untrusted results that entered the request before this round (SPEC §17)."""

    def call_timeout_s(self, execution: PlannedExecution) -> float:
        """A long-running tool's call waits up to what is left of the tool budget (§22); every
        other call of the round keeps its tool timeout."""
        return self.budget_s if execution.checked.tool.long_running else self.timeout_s


@dataclass(slots=True)
class Remember:
    """Store hidden rounds under each of ``keys``, continuity keys of one answer (no answer
    expected): stored together, in one write."""

    keys: list[str]
    messages: list[dict[str, Any]]
    context: list[str] = field(default_factory=list)
    """Fingerprints of the last turns before the answer: what tells apart two conversations
    whose answers are equal."""
    origin: str = ""
    """The same for every key of one answer, so its rounds go back once."""
    taint_sources: list[str] = field(default_factory=list)
    """Untrusted tools whose results are in these rounds or before them: restored with them."""


@dataclass(slots=True)
class Respond:
    """The final answer: the JSON body (a streaming client's: the response it was shown)."""

    body: dict[str, Any]


@dataclass(slots=True)
class Fail:
    status: int
    code: str
    message: str
    retry_after: str | None = None

    @classmethod
    def internal(cls) -> Fail:
        """The sidecar itself failed: the one internal-error answer (``internal_error``)."""
        err = internal_error()
        return cls(err.status, err.code, err.message)


Command = BeginStream | Recall | CallModel | ExecuteTools | Remember | Respond | Fail

# --- events ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Remembered:
    messages: list[dict[str, Any]]
    context: list[str]
    origin: str
    taint_sources: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Recalled:
    found: dict[str, Remembered]


@dataclass(slots=True)
class ModelReplied:
    body: dict[str, Any]


@dataclass(slots=True)
class ModelFailed:
    """The upstream call failed: an HTTP error status, or kind timeout/unreachable/protocol."""

    kind: str
    message: str
    status: int | None = None
    retry_after: str | None = None  # the provider's Retry-After, passed on to the client


@dataclass(slots=True)
class ToolsDone:
    outcomes: list[ToolOutcome]
    elapsed_s: float
    """Wall time the round's executions took, spent from the tool budget."""


@dataclass(slots=True)
class Done:
    """Acknowledges a command that has no result (BeginStream, Remember)."""


Event = Recalled | ModelReplied | ModelFailed | ToolsDone | Done

Run = Generator[Command, Event, None]
"""The engine's exchange, and each of its steps that may end it."""
