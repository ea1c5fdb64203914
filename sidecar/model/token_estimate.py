"""How many tokens a model call spent, estimated where its provider counted none (a stream
cut before its usage, a local server that reports none): for budgets and the audit (#45).

No tokenizer: OpenAI's are compiled code with vocabularies fetched at run time, Anthropic's
is not published, and a local server's is its model's own. Instead a rule calibrated on the
recorded provider exchanges (tests/fixtures/providers, which carry the providers' own
counts): prose is about four characters a token, JSON Schema about six (its keywords are
whole tokens); what JSON's syntax adds is not text the model reads, so only keys and string
values count. Each message, tool call and tool list adds a frame of tokens the provider
renders around it: the Messages API prepends a tool-use system prompt (346 tokens for Claude
4 models as documented; about 500 measured for Haiku 4.5, so 400 between them). The
recorded exchanges come within 25% of the providers' counts
(tests/providers/test_usage_estimate.py says which do not, and why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

CHARS_PER_TOKEN = 4.0
SCHEMA_CHARS_PER_TOKEN = 6.0


@dataclass(frozen=True, slots=True)
class Frames:
    """Tokens a protocol's provider adds around what the request and answer carry."""

    message: int
    tools: int  # once, when the request offers tools (not a legacy ``functions`` list)
    call: int  # each tool call the model writes (or a request repeats)
    parallel: int  # once, when an answer writes several calls (OpenAI wraps them)


FRAMES: dict[str, Frames] = {
    "chat": Frames(message=3, tools=20, call=8, parallel=16),
    "responses": Frames(message=3, tools=20, call=8, parallel=16),
    "messages": Frames(message=4, tools=400, call=28, parallel=0),
}

# Keys whose values name a shape, not text the model reads (or are not read at all).
_NOT_TEXT = frozenset(
    (
        "role",
        "type",
        "model",
        "id",
        "call_id",
        "tool_use_id",
        "tool_call_id",
        "signature",
        "encrypted_content",
        "cache_control",
        "stream",
        "stream_options",
        "tool_choice",
        "max_tokens",
        "max_completion_tokens",
        "max_output_tokens",
        "temperature",
        "top_p",
        "strict",
        "additionalProperties",
        "metadata",
        "store",
        "user",
        "defer_loading",
    )
)
_TOOL_LISTS = ("tools", "functions")
# Where an answer keeps what the model wrote (an Anthropic tool call's ``input`` is an object).
_WRITTEN = frozenset(("content", "text", "thinking", "refusal", "name", "arguments"))
_CALL_TYPES = frozenset(("tool_use", "function_call", "server_tool_use"))


def request_tokens(body: dict[str, Any], protocol: str) -> int:
    """Input tokens of a request as its provider would count them, about."""
    frames = FRAMES.get(protocol, FRAMES["chat"])
    tools = [tool for key in _TOOL_LISTS for tool in _listed(body.get(key))]
    said = {key: value for key, value in body.items() if key not in _TOOL_LISTS}
    tokens = (
        text_chars(said) / CHARS_PER_TOKEN
        + sum(text_chars(tool) for tool in tools) / SCHEMA_CHARS_PER_TOKEN
    )
    conversation = _listed(body.get("messages")) or _listed(body.get("input"))
    tokens += frames.message * len(conversation) + frames.call * _calls_in(conversation)
    if _listed(body.get("tools")):
        tokens += frames.tools
    return max(1, round(tokens))


def answer_tokens(generated_chars: int, calls: int, protocol: str) -> int:
    """Output tokens of an answer that wrote ``generated_chars`` of text, thinking and
    arguments and ``calls`` tool calls."""
    frames = FRAMES.get(protocol, FRAMES["chat"])
    tokens = generated_chars / CHARS_PER_TOKEN + frames.call * calls
    return round(tokens + (frames.parallel if calls > 1 else 0))


def reply_tokens(reply: dict[str, Any], protocol: str) -> int:
    """Output tokens of a whole (not streamed) answer."""
    written = [reply.get(key) for key in ("choices", "content", "output")]
    return answer_tokens(_written_chars(written), _calls_in(written), protocol)


def text_chars(value: Any) -> int:
    """Characters of the keys and strings in ``value`` that the model reads."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(
            len(key) + text_chars(item) for key, item in value.items() if key not in _NOT_TEXT
        )
    if isinstance(value, list):
        return sum(text_chars(item) for item in value)
    return 0


def _written_chars(value: Any, key: str | None = None) -> int:
    """Characters the model wrote in an answer: its text, thinking, tool names and arguments."""
    if isinstance(value, str):
        return len(value) if key in _WRITTEN else 0
    if isinstance(value, dict):
        return sum(
            len(orjson.dumps(item)) if name == "input" else _written_chars(item, name)
            for name, item in value.items()
        )
    if isinstance(value, list):
        return sum(_written_chars(item, key) for item in value)
    return 0


def _calls_in(value: Any) -> int:
    """Tool calls written in ``value``: blocks or items of a call type, Chat ``tool_calls``
    entries and a legacy ``function_call``."""
    if isinstance(value, list):
        return sum(_calls_in(item) for item in value)
    if not isinstance(value, dict):
        return 0
    own = 1 if value.get("type") in _CALL_TYPES or "function_call" in value else 0
    own += len(_listed(value.get("tool_calls")))
    return own + sum(_calls_in(item) for item in value.values() if isinstance(item, list | dict))


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
