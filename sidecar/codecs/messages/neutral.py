"""Anthropic Messages bodies read into the neutral shape (``model/neutral.py``) and written from it:
this protocol's side of translation."""

from __future__ import annotations

import re
from typing import Any

from ...model.neutral import (
    Choice,
    FunctionTool,
    Message,
    Part,
    Reply,
    Request,
    Stop,
    Untranslatable,
    Usage,
    text_of,
)
from ..base import as_int
from ..parts import (
    arguments_object,
    arguments_text,
    as_dict,
    as_list,
    from_url,
    not_deferred,
    stop_list,
    string,
    unwrap_carried,
    wrap_carried,
)

PROTOCOL = "messages"
# The API requires max_tokens; a caller of another protocol may leave it out.
DEFAULT_MAX_TOKENS = 8192
MAPPED = frozenset(
    {
        "model",
        "system",
        "messages",
        "tools",
        "tool_choice",
        "max_tokens",
        "temperature",
        "top_p",
        "stop_sequences",
        "stream",
        "output_format",
        "output_config",
    }
)
DROPPED = frozenset(
    {"metadata", "top_k", "thinking", "service_tier", "context_management", "inference_geo"}
)
REFUSED = {
    "mcp_servers": lambda v: bool(v),
    "container": lambda v: v is not None,
    "thread": lambda v: v is not None,
}
_REFUSABLE = frozenset(REFUSED)
STOP_TO_WIRE = {
    "end": "end_turn",
    "tool_calls": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "content_filter": "refusal",
    "refusal": "refusal",
}
WIRE_TO_STOP: dict[Any, Stop] = {
    "end_turn": "end",
    "tool_use": "tool_calls",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    "model_context_window_exceeded": "max_tokens",
    "pause_turn": "end",
}
# Blocks a provider ran on its own side (web search, code execution): their result already
# shaped the text; no other protocol has a place for them.
_CHOICE_TO_WIRE = {"auto": "auto", "required": "any", "named": "tool"}
_SERVER_BLOCK = re.compile(r"^(server_tool_use|.*_tool_result|.*_result)$")
_ID_CHARACTER = re.compile(r"[^a-zA-Z0-9_-]")
_FORMATS = frozenset({"output_config", "output_format"})  # structured output asked


# --- request ----------------------------------------------------------------------------------


def read_request(body: dict[str, Any]) -> tuple[Request, list[str]]:
    if not _REFUSABLE.isdisjoint(body):  # one scan in C, most bodies have none
        for name, refused in REFUSED.items():
            if name in body and refused(body[name]):
                raise Untranslatable(name)
    dropped = [] if MAPPED.issuperset(body) else [name for name in body if name not in MAPPED]
    messages = []
    for position, message in enumerate(as_list(body.get("messages"), "messages")):
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "developer"):
            # Claude Code 2.1.330 sends its environment so for a model id not Claude's: an
            # instruction where it stands, as Chat and Responses have them.
            role = "system"
        elif role not in ("user", "assistant"):
            raise Untranslatable(f"messages[{position}]: not a user, assistant or system turn")
        content = message.get("content")
        if isinstance(content, str):  # most turns: one text
            messages.append(Message(role, [{"type": "text", "text": content}]))
        else:
            messages.append(Message(role, _parts(content, position)))
    choice, parallel = _choice(body.get("tool_choice"))
    system = body.get("system")
    tools = body.get("tools")
    # Positional, in Request's field order: a keyword call of a dataclass of this many
    # fields costs twice as much, on every request.
    request = Request(
        body.get("model"),
        [] if system is None else _parts(system, -1),
        messages,
        [_tool(t) for t in tools] if tools else [],
        choice,
        parallel,  # parallel_tool_calls
        body.get("max_tokens"),
        body.get("temperature"),
        body.get("top_p"),
        stop_list(body.get("stop_sequences")),
        body.get("stream") is True,
        None if _FORMATS.isdisjoint(body) else _json_schema(body),
    )
    return request, dropped


def _parts(content: Any, position: int) -> list[Part]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts: list[Part] = []
    for raw in as_list(content, "a message's content"):
        part = _part(as_dict(raw, "a content block"))
        if part is not None:
            parts.append(part)
    return parts


def _part(block: dict[str, Any]) -> Part | None:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": string(block.get("text"), "a text block")}
    if kind in ("image", "document"):
        return _source(kind, as_dict(block.get("source"), f"an {kind} block's source"), block)
    if kind == "tool_use":
        return {
            "type": "tool_call",
            "id": string(block.get("id"), "a tool_use id"),
            "name": string(block.get("name"), "a tool_use name"),
            "arguments": arguments_text(block.get("input")),
        }
    if kind == "tool_result":
        return {
            "type": "tool_result",
            "id": string(block.get("tool_use_id"), "a tool_result's tool_use_id"),
            "content": _result_content(block.get("content")),
            "is_error": block.get("is_error") is True,
        }
    if kind == "thinking":
        carried = unwrap_carried(block.get("signature"))
        return {
            "type": "reasoning",
            "text": str(block.get("thinking", "")),
            "carried": carried or {"protocol": PROTOCOL, "value": block},
        }
    if kind == "redacted_thinking":
        return {"type": "reasoning", "text": "", "carried": {"protocol": PROTOCOL, "value": block}}
    if isinstance(kind, str) and _SERVER_BLOCK.match(kind):
        return None
    raise Untranslatable(f"a content block of type {kind!r}")


def _result_content(content: Any) -> list[Part]:
    """A tool result's text and images; read flat, never as nested blocks (a result inside a
    result would recurse as deep as a hostile body nests)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts: list[Part] = []
    for block in as_list(content, "a tool_result's content"):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": string(block.get("text"), "a text block")})
        elif kind == "image":
            source = as_dict(block.get("source"), "an image block's source")
            parts.append(_source("image", source, block))
    return parts


def _source(kind: str, source: dict[str, Any], block: dict[str, Any]) -> Part:
    extra = {"filename": block["title"]} if isinstance(block.get("title"), str) else {}
    source_type = source.get("type")
    if source_type == "base64":
        return {
            "type": kind,
            "media_type": string(source.get("media_type"), "a source's media_type"),
            "data": string(source.get("data"), "a source's data"),
            **extra,
        }
    if source_type == "url":
        return from_url(kind, source.get("url"), **extra)
    if source_type == "text" and kind == "document":
        return {"type": "text", "text": string(source.get("data"), "a text document")}
    raise Untranslatable(f"an {kind} whose source is {source_type!r}")


def _tool(raw: Any) -> FunctionTool:
    tool = not_deferred(as_dict(raw, "a tool"))
    if tool.get("type", "custom") != "custom":
        raise Untranslatable(f"the provider-run tool {tool.get('type')!r}")
    return FunctionTool(
        name=string(tool.get("name"), "a tool's name"),
        description=tool.get("description"),
        parameters=tool.get("input_schema") or {"type": "object", "properties": {}},
        strict=tool.get("strict"),
    )


def _choice(raw: Any) -> tuple[Choice | None, bool | None]:
    if raw is None:
        return None, None
    choice = as_dict(raw, "tool_choice")
    parallel = False if choice.get("disable_parallel_tool_use") is True else None
    kind = choice.get("type")
    if kind == "tool":
        return Choice("named", string(choice.get("name"), "tool_choice's name")), parallel
    modes = {"auto": "auto", "any": "required", "none": "none"}
    if kind not in modes:
        raise Untranslatable(f"tool_choice {kind!r}")
    return Choice(modes[kind]), parallel


def _json_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    config = body.get("output_config")
    wanted = config.get("format") if isinstance(config, dict) else body.get("output_format")
    if not isinstance(wanted, dict):
        return None
    if wanted.get("type") != "json_schema":
        raise Untranslatable(f"output format {wanted.get('type')!r}")
    return {"name": "answer", "schema": wanted.get("schema") or {}, "strict": True}


def write_request(request: Request) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        "messages": _wire_messages(request.messages),
    }
    system = text_of(request.system)
    # A system turn in the middle of a Chat or Responses conversation has no place here: it
    # joins the system prompt (docs/translation.md).
    system += "".join(
        "\n\n" + text_of(m.parts) for m in request.messages if m.role == "system"
    ).rstrip()
    if system.strip():
        body["system"] = system.strip("\n")
    if request.tools:
        body["tools"] = [_wire_tool(t) for t in request.tools]
    choice = _wire_choice(request)
    if choice is not None:
        body["tool_choice"] = choice
    for name, value in (("temperature", request.temperature), ("top_p", request.top_p)):
        if value is not None:
            body[name] = value
    if request.stop:
        body["stop_sequences"] = request.stop
    if request.json_schema is not None:
        if not request.json_schema:
            raise Untranslatable("JSON mode without a schema (Messages needs one)")
        body["output_config"] = {
            "format": {"type": "json_schema", "schema": request.json_schema["schema"]}
        }
    return body


def _wire_tool(tool: FunctionTool) -> dict[str, Any]:
    wire: dict[str, Any] = {"name": tool.name, "input_schema": tool.parameters}
    if tool.description is not None:
        wire["description"] = tool.description
    return wire


def _wire_choice(request: Request) -> dict[str, Any] | None:
    choice = request.choice
    single = request.parallel_tool_calls is False and bool(request.tools)
    if choice is None:
        return {"type": "auto", "disable_parallel_tool_use": True} if single else None
    if choice.mode == "none":
        return {"type": "none"}
    wire: dict[str, Any] = {"type": _CHOICE_TO_WIRE[choice.mode]}
    if choice.mode == "named":
        wire["name"] = choice.name
    if single:
        wire["disable_parallel_tool_use"] = True
    return wire


def _wire_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Turns alternate (consecutive turns of one role join), results lead their turn."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        blocks = [b for b in map(_wire_block, message.parts) if b is not None]
        if message.role == "user" and len(blocks) > 1:  # (one block: no key function called)
            blocks.sort(key=_results_first)
        if wire and wire[-1]["role"] == message.role:
            joined = wire[-1]["content"] + blocks
            if message.role == "user":
                joined.sort(key=_results_first)
            wire[-1]["content"] = joined
        else:
            wire.append({"role": message.role, "content": blocks})
    return [m for m in wire if m["content"]]


def _results_first(block: dict[str, Any]) -> bool:
    return block["type"] != "tool_result"


def _wire_block(part: Part, reply: bool = False) -> dict[str, Any] | None:
    kind = part["type"]
    if kind == "text":
        # The API refuses an empty text block.
        return {"type": "text", "text": part["text"]} if part["text"] else None
    if kind in ("image", "document"):
        if "url" in part:
            source: dict[str, Any] = {"type": "url", "url": part["url"]}
        else:
            source = {"type": "base64", "media_type": part["media_type"], "data": part["data"]}
        block: dict[str, Any] = {"type": kind, "source": source}
        if kind == "document" and "filename" in part:
            block["title"] = part["filename"]
        return block
    if kind == "tool_call":
        return {
            "type": "tool_use",
            "id": tool_id(part["id"]),
            "name": part["name"],
            "input": arguments_object(part["arguments"], part["id"]),
        }
    if kind == "tool_result":
        content = [b for b in map(_wire_block, part["content"]) if b is not None]
        return {
            "type": "tool_result",
            "tool_use_id": tool_id(part["id"]),
            "content": content,
            "is_error": part["is_error"],
        }
    if kind == "refusal":
        return {"type": "text", "text": part["text"]} if part["text"] else None
    if kind == "reasoning":
        carried = part.get("carried")
        if carried and carried["protocol"] == PROTOCOL:
            return carried["value"]
        if reply:
            # Another protocol's reasoning, carried in the signature the client echoes back.
            signature = wrap_carried(carried) if carried else ""
            return {"type": "thinking", "thinking": part["text"], "signature": signature}
        # Reasoning of another protocol's model: Messages would refuse it unsigned.
        return None
    raise Untranslatable(f"a part of type {kind!r}")


def tool_id(call_id: str) -> str:
    """A call id as Messages accepts it (letters, digits, ``_`` and ``-``); the same id always
    gives the same result, so a call and its result still meet."""
    return _ID_CHARACTER.sub("_", call_id) or "call"


# --- reply ------------------------------------------------------------------------------------


def read_reply(body: dict[str, Any]) -> Reply:
    if body.get("type") == "error":
        raise Untranslatable("an error body as a reply")
    content = as_list(body.get("content"), "content")
    parts = [p for p in (_part(as_dict(b, "a content block")) for b in content) if p is not None]
    stop = WIRE_TO_STOP.get(body.get("stop_reason"), "end")
    # Positional, in Reply's field order (no ``created``: Messages has none): cheaper.
    return Reply(
        str(body.get("id") or ""),
        body.get("model"),
        parts,
        stop,
        read_usage(body.get("usage")),
        0,
        body.get("stop_sequence"),
    )


def read_usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    read = as_int(raw.get("cache_read_input_tokens"))
    creation = as_int(raw.get("cache_creation_input_tokens"))
    input_tokens = as_int(raw.get("input_tokens")) + read + creation
    return Usage(input_tokens, as_int(raw.get("output_tokens")), read, creation)


def write_usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": max(usage.input - usage.cache_read - usage.cache_creation, 0),
        "output_tokens": usage.output,
        "cache_read_input_tokens": usage.cache_read,
        "cache_creation_input_tokens": usage.cache_creation,
    }


def write_reply(reply: Reply, request: Request) -> dict[str, Any]:
    content = []
    for part in reply.parts:
        if part["type"] == "text":  # the common case, without a call
            if part["text"]:
                content.append({"type": "text", "text": part["text"]})
            continue
        block = _wire_block(part, reply=True)
        if block is not None:
            content.append(block)
    return {
        "id": reply.id if reply.id.startswith("msg_") else f"msg_{tool_id(reply.id)}",
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": STOP_TO_WIRE[reply.stop],
        "stop_sequence": reply.stop_sequence,
        "usage": write_usage(reply.usage or Usage()),
    }
