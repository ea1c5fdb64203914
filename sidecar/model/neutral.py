"""The neutral shape of a request, an answer and a streamed answer, whatever protocol carries
it: every protocol's home (``codecs/<protocol>/``) reads its bodies and streams into it and
writes them from it, so translation is a read in one home and a write in another (contract
§18). Richer than the engine's conversation (``conversation.py``): every content part a
protocol can carry.

Parts are plain dicts (translation runs on every request; dataclasses per part would cost more
than the rest of it):
- ``{"type": "text", "text"}``
- ``{"type": "image", "url"}`` or ``{"type": "image", "media_type", "data"}`` (base64)
- ``{"type": "document", "media_type", "data", "filename"?}`` or ``{"type": "document", "url"}``
- ``{"type": "reasoning", "text", "carried": {"protocol", "value"}?}``: the model's reasoning;
  ``carried`` is the original block or item, opaque, given back only to its own protocol
- ``{"type": "refusal", "text"}``
- ``{"type": "tool_call", "id", "name", "arguments"}`` (arguments: JSON text)
- ``{"type": "tool_result", "id", "content": [text/image parts], "is_error"}``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant"]
Stop = Literal["end", "tool_calls", "max_tokens", "stop_sequence", "content_filter", "refusal"]
Part = dict[str, Any]


class Untranslatable(ValueError):
    """The request uses something the target protocol cannot carry and that cannot be
    dropped safely; the message names it."""


@dataclass(slots=True)
class Message:
    role: Role
    parts: list[Part]


@dataclass(slots=True)
class FunctionTool:
    name: str
    description: str | None
    parameters: dict[str, Any]
    strict: bool | None = None
    freeform: bool = False
    """A Responses ``custom`` tool (free text input, Codex's apply_patch): offered elsewhere as
    a function of one string ``input``, its calls handed back as ``custom_tool_call`` items."""
    namespace: str | None = None
    """A function of a Responses ``namespace`` tool (Codex's sub-agents and MCP servers):
    offered elsewhere as the function ``<namespace>__<own name>`` (``name``), its calls handed
    back as ``function_call`` items that name the namespace and the tool's own name."""

    @property
    def own_name(self) -> str:
        """The name the caller offered the tool under (inside its namespace, if any)."""
        return self.name[len(self.namespace) + 2 :] if self.namespace else self.name

    @property
    def reshaped(self) -> bool:
        """Whether the caller expects its calls in a shape other than a plain function call."""
        return self.freeform or self.namespace is not None


@dataclass(slots=True)
class Choice:
    """``mode`` auto | none | required | named; ``name`` for named."""

    mode: str
    name: str | None = None


@dataclass(slots=True)
class Request:
    model: Any
    system: list[Part]
    messages: list[Message]
    tools: list[FunctionTool] = field(default_factory=list)
    choice: Choice | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    json_schema: dict[str, Any] | None = None
    """Structured output: ``{"name", "schema", "strict"}``; ``{}`` for plain JSON mode."""
    reasoning_effort: str | None = None
    legacy_functions: bool = False
    """A Chat caller that used ``functions``: its answer carries ``function_call``."""
    system_role: str = "system"
    """``system`` or ``developer``: the OpenAI protocols tell them apart, Messages does not."""


@dataclass(slots=True)
class Usage:
    """Token counts with one meaning: ``input`` counts every input token, cached ones included
    (OpenAI's sense; Anthropic's ``input_tokens`` leaves cache reads and writes out)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_creation: int = 0
    reasoning: int = 0


@dataclass(slots=True)
class Reply:
    id: str
    model: Any
    parts: list[Part]
    stop: Stop
    usage: Usage | None
    created: int = 0
    stop_sequence: str | None = None


def text_of(parts: list[Part]) -> str:
    if len(parts) == 1:
        return parts[0]["text"] if parts[0]["type"] == "text" else ""
    return "".join([p["text"] for p in parts if p["type"] == "text"])


# A streamed answer, one event at a time: the stream counterpart of ``Reply``. A reader turns a
# protocol's SSE into these events and a writer puts them out in another protocol's: the
# answer's text (a plain ``str``: nearly every event is one, and a piece of text needs nothing
# around it) and function-call argument pieces as they come, usage (``Usage``), why the model
# stopped (``Stop``), failure. Provider-run tools have no event: no other protocol has a place
# for them.
# Not frozen: a frozen dataclass is built through object.__setattr__, twice the cost, and a
# stream makes one event per piece of its answer; nothing keeps or changes them once written.


@dataclass(slots=True)
class Started:
    """The answer's head: the provider's id for it and the model that answers."""

    id: str | None
    model: str | None
    created: int = 0


@dataclass(slots=True)
class Refusal:
    """A piece of the model's refusal (a Chat ``refusal`` delta, a Responses refusal part)."""

    text: str


@dataclass(slots=True)
class CallStarted:
    """A function call begins; ``index`` names it in the source stream."""

    index: int
    call_id: str
    name: str


@dataclass(slots=True)
class CallArguments:
    """The next piece of a call's JSON arguments, passed on as it came (never parsed)."""

    index: int
    json: str


@dataclass(slots=True)
class Reasoning:
    """A whole piece of the model's reasoning (a reasoning part, its original carried
    opaquely): it goes out only to a caller whose protocol has a place for it."""

    part: Part


@dataclass(slots=True)
class Told:
    """Usage as far as the stream has told it."""

    usage: Usage


@dataclass(slots=True)
class Stopped:
    reason: Stop


@dataclass(slots=True)
class Ended:
    """The source stream's end marker: the answer is complete."""


@dataclass(slots=True)
class Failed:
    """The provider reported a failure inside the stream."""

    code: str
    message: str
    type: str = "api_error"


StreamEvent = (
    Started
    | str
    | Refusal
    | CallStarted
    | CallArguments
    | Reasoning
    | Told
    | Stopped
    | Ended
    | Failed
)
