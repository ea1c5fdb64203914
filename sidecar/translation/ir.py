"""The translation's common shape of a request and a reply, richer than the engine's neutral
model: every content part a protocol can carry, so a body can be read from one protocol and
written in another.

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
