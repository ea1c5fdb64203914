"""What a streamed answer says, whatever protocol carries it (contract §18).

Stream translation reads the target's SSE into these events and writes them out in the
caller's protocol. They hold only what all three protocols can carry: the answer's text,
function calls and their argument pieces, usage, why the model stopped, and failure.
Reasoning and provider-run tools are not among them: no protocol can take another's (their
signatures and encrypted content are bound to the provider that made them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

StopReason = Literal["end", "length", "tool_calls", "stop_sequence", "content_filter"]
"""Why the model stopped: its turn ended, it hit the token limit, it called tools, a stop
sequence, or the provider's filter (a refusal)."""


@dataclass(slots=True, frozen=True)
class Started:
    """The answer's head: the provider's id for it and the model that answers."""

    id: str | None
    model: str | None
    created: int = 0


@dataclass(slots=True, frozen=True)
class Text:
    text: str


@dataclass(slots=True, frozen=True)
class CallStarted:
    """A function call begins; ``index`` names it in the source stream."""

    index: int
    call_id: str
    name: str


@dataclass(slots=True, frozen=True)
class CallArguments:
    """The next piece of a call's JSON arguments, passed on as it came (never parsed)."""

    index: int
    json: str


@dataclass(slots=True, frozen=True)
class TokenUsage:
    """Usage as far as the stream has told it. ``input_tokens`` counts every input token,
    cached ones included (OpenAI's meaning; Anthropic counts cache reads and writes apart)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_creation: int = 0
    reasoning_tokens: int = 0


@dataclass(slots=True, frozen=True)
class Stopped:
    reason: StopReason


@dataclass(slots=True, frozen=True)
class Ended:
    """The source stream's end marker: the answer is complete."""


@dataclass(slots=True, frozen=True)
class Failed:
    """The provider reported a failure inside the stream."""

    code: str
    message: str
    type: str = "api_error"


StreamEvent = Started | Text | CallStarted | CallArguments | TokenUsage | Stopped | Ended | Failed
