"""The provider-neutral view of a mediated conversation.

Runner messages stay in their provider shape (they are never rewritten, only read); what the
engine decides on — tool calls, results, usage, tool choice — is neutral. Each message also gets
a semantic fingerprint so a conversation can be recognised when the runner sends it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .outcome import ToolOutcome

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


@dataclass(slots=True)
class Conversation:
    """A parsed client request."""

    params: dict[str, Any]
    """Every request field the engine does not own, passed upstream untouched."""
    messages: list[dict[str, Any]]
    fingerprints: list[str]
    seed: str
    """Fingerprint of what precedes the messages (Anthropic top-level system)."""
    roles: list[str]
    tools: list[dict[str, Any]]
    runner_tool_names: set[str]
    tool_choice: ToolChoice
    stream: bool
    include_usage: bool
    legacy_functions: bool = False
