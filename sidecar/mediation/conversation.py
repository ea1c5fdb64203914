"""The provider-neutral view of a mediated conversation.

Runner messages stay in their provider shape (they are never rewritten, only read); what the
engine decides on — tool calls, results, usage, tool choice — is neutral. Each message also gets
a semantic fingerprint so a conversation can be recognised when the runner sends it back.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from clawpod.sidecar.execution.outcome import ToolOutcome

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
class Usage:
    """Token usage summed over every upstream call of one client request."""

    fields: dict[str, Any] = field(default_factory=dict)
    input_key: str = "input_tokens"
    output_key: str = "output_tokens"

    @property
    def input_tokens(self) -> int:
        return int(self.fields.get(self.input_key) or 0)

    @property
    def output_tokens(self) -> int:
        return int(self.fields.get(self.output_key) or 0)

    def add(self, other: dict[str, Any] | None) -> None:
        if other:
            self.fields = sum_usage(self.fields, other)


def sum_usage(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """Add numeric fields (recursively); keep the latest non-numeric ones (e.g. service_tier)."""
    merged = dict(left)
    for key, value in right.items():
        current = merged.get(key)
        if isinstance(value, bool) or value is None:
            merged.setdefault(key, value)
        elif isinstance(value, int | float):
            merged[key] = (current if isinstance(current, int | float) else 0) + value
        elif isinstance(value, dict):
            merged[key] = sum_usage(current if isinstance(current, dict) else {}, value)
        else:
            merged[key] = value
    return merged


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


def canonical_json(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # integers beyond 64 bits, which the standard library can write
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def canonical_arguments(arguments: str | dict[str, Any] | None) -> str:
    """Arguments with key order and whitespace made irrelevant (invalid JSON kept as text)."""
    if arguments is None or arguments == "":
        return "{}"
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments.strip()
    return canonical_json(arguments).decode()


def normalise_text(text: str) -> str:
    return " ".join(text.split())


def digest(*parts: str) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part.encode())
        hasher.update(b"\x00")
    return hasher.hexdigest()
