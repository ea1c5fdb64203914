"""OpenAI Responses bodies read into the neutral shape (``model/neutral.py``) and written from it:
this protocol's side of translation."""

from __future__ import annotations

import time
from typing import Any

import orjson

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
    as_dict,
    as_list,
    data_url,
    from_url,
    json_format,
    not_deferred,
    read_openai_usage,
    result_text,
    string,
    unwrap_carried,
    wrap_carried,
    write_openai_usage,
)
from .approval_items import REQUEST, RESPONSE, is_sidecar_item, is_sidecar_tool

PROTOCOL = "responses"
MAPPED = frozenset(
    {
        "model",
        "instructions",
        "input",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_output_tokens",
        "temperature",
        "top_p",
        "stream",
        "stream_options",
        "text",
        "reasoning",
    }
)
DROPPED = frozenset(
    {
        "store",
        "include",
        "metadata",
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "service_tier",
        "truncation",
        "max_tool_calls",
        "client_metadata",
    }
)
# previous_response_id and conversation name what the provider stored: a provider of another
# protocol stores nothing, and the sidecar does not expand them (docs/translation.md).
REFUSED = {
    "previous_response_id": lambda v: v is not None,
    "conversation": lambda v: v is not None,
    "background": lambda v: v is True,
    "prompt": lambda v: v is not None,
    "top_logprobs": lambda v: bool(v),
}
_REFUSABLE = frozenset(REFUSED)
# Provider-run tools a provider of another protocol cannot run, left out of the offer rather
# than refused: Codex offers web search by default, and a model without it still answers.
DROPPED_TOOLS = frozenset({"web_search", "web_search_preview"})
FREEFORM_PARAMETERS = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "the tool's whole input"}},
    "required": ["input"],
}
_CLIENT_ROLES = {"user": "user", "system": "system", "developer": "system"}
_TEXT_PARTS = ("input_text", "output_text", "text")


# --- request ----------------------------------------------------------------------------------


def read_request(body: dict[str, Any]) -> tuple[Request, list[str]]:
    if not _REFUSABLE.isdisjoint(body):  # one scan in C, most bodies have none
        for name in REFUSED.keys() & body.keys():
            if REFUSED[name](body[name]):
                raise Untranslatable(name)
    dropped = [] if MAPPED.issuperset(body) else [name for name in body if name not in MAPPED]
    raw_input = body.get("input")
    items = [{"role": "user", "content": raw_input}] if isinstance(raw_input, str) else raw_input
    messages: list[Message] = []
    for position, raw in enumerate(as_list(items, "input")):
        _read_item(as_dict(raw, "an input item"), position, messages)
    instructions = body.get("instructions")
    system = [{"type": "text", "text": instructions}] if isinstance(instructions, str) else []
    first = items[0] if items and isinstance(items[0], dict) else {}
    system_role = "developer" if first.get("role") == "developer" and not system else "system"
    # Leading system and developer items join the instructions: many local chat templates
    # take one system message, first (Codex sends instructions and a developer message).
    while messages and messages[0].role == "system":
        separator = [{"type": "text", "text": "\n\n"}] if system else []
        system = [*system, *separator, *messages.pop(0).parts]
    reasoning = body.get("reasoning")
    raw_tools = body.get("tools")
    # Positional, in Request's field order: a keyword call of a dataclass of this many
    # fields costs twice as much, on every request.
    request = Request(
        body.get("model"),
        system,
        messages,
        _tools(raw_tools, dropped) if raw_tools else [],
        _choice(body.get("tool_choice")),
        body.get("parallel_tool_calls"),
        body.get("max_output_tokens"),
        body.get("temperature"),
        body.get("top_p"),
        [],  # stop: Responses has none
        body.get("stream") is True,
        _json_schema(body.get("text")),
        reasoning.get("effort") if isinstance(reasoning, dict) else None,
        False,  # legacy_functions
        system_role,
    )
    return request, dropped


def _read_item(item: dict[str, Any], position: int, messages: list[Message]) -> None:
    kind = item.get("type", "message")
    # The engine settles the sidecar's approval items; no provider ever sees them. Only an
    # item of their two types can be one: a message is not asked (this runs per item).
    if kind in (REQUEST, RESPONSE) and is_sidecar_item(item):
        return
    if kind == "message":
        role = item.get("role")
        if role == "assistant":
            _append(messages, "assistant", _parts(item.get("content"), position))
        elif role in _CLIENT_ROLES:
            parts = _parts(item.get("content"), position)
            if _CLIENT_ROLES[role] == "system" and not messages:
                messages.append(Message("system", parts))
            else:
                _append(messages, _CLIENT_ROLES[role], parts)
        else:
            raise Untranslatable(f"input[{position}]: role {role!r}")
    elif kind == "function_call":
        name = string(item.get("name"), "a function_call's name")
        namespace = item.get("namespace")
        call = {
            "type": "tool_call",
            "id": string(item.get("call_id"), "a function_call's call_id"),
            "name": flat_name(string(namespace, "a namespace"), name) if namespace else name,
            "arguments": string(item.get("arguments", ""), "a function_call's arguments"),
        }
        _append(messages, "assistant", [call])
    elif kind == "custom_tool_call":
        call = {
            "type": "tool_call",
            "id": string(item.get("call_id"), "a custom_tool_call's call_id"),
            "name": string(item.get("name"), "a custom_tool_call's name"),
            "arguments": orjson.dumps({"input": str(item.get("input", ""))}).decode(),
        }
        _append(messages, "assistant", [call])
    elif kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        content = (
            [{"type": "text", "text": output}] if isinstance(output, str) else _parts(output, -1)
        )
        result = {
            "type": "tool_result",
            "id": string(item.get("call_id"), "a call output's call_id"),
            "content": [p for p in content if p["type"] in ("text", "image")],
            "is_error": False,
        }
        _append(messages, "user", [result])
    elif kind == "reasoning":
        _append(messages, "assistant", [_reasoning(item)])
    else:
        raise Untranslatable(f"input[{position}]: an item of type {kind!r}")


def _append(messages: list[Message], role: Any, parts: list[Part]) -> None:
    """Consecutive items of one side are one turn (a reasoning item, a message, calls)."""
    if messages and messages[-1].role == role and role != "system":
        messages[-1].parts += parts
    else:
        messages.append(Message(role, parts))


def _reasoning(item: dict[str, Any]) -> Part:
    summary = item.get("summary") or []
    text = "".join(s.get("text", "") for s in summary if isinstance(s, dict))
    carried = unwrap_carried(item.get("encrypted_content"))
    return {
        "type": "reasoning",
        "text": text,
        "carried": carried or {"protocol": PROTOCOL, "value": item},
    }


def _parts(content: Any, position: int) -> list[Part]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts: list[Part] = []
    for raw in as_list(content, "an item's content"):
        part = as_dict(raw, "a content part")
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": string(part.get("text"), "a text part")})
        elif kind == "refusal":
            parts.append({"type": "refusal", "text": str(part.get("refusal", ""))})
        elif kind == "input_image":
            if part.get("file_id") is not None:
                raise Untranslatable("an input_image by file_id (the provider's stored file)")
            parts.append(from_url("image", part.get("image_url")))
        elif kind == "input_file":
            parts.append(_file(part))
        else:
            raise Untranslatable(f"input[{position}]: a content part of type {kind!r}")
    return parts


def _file(part: dict[str, Any]) -> Part:
    extra = {"filename": part["filename"]} if isinstance(part.get("filename"), str) else {}
    if part.get("file_data") is not None:
        return from_url("document", part["file_data"], **extra)
    if part.get("file_url") is not None:
        return from_url("document", part["file_url"], **extra)
    raise Untranslatable("an input_file by file_id (the provider's stored file)")


def _tools(raw: Any, dropped: list[str]) -> list[FunctionTool]:
    tools: list[FunctionTool] = []
    for position, entry in enumerate(as_list(raw, "tools")):
        tool = as_dict(entry, "a tool")
        kind = tool.get("type")
        if kind == "namespace":
            tools += _namespace(tool)
        elif is_sidecar_tool(tool):
            continue  # the client's name for the sidecar's own tools: never goes upstream
        elif kind in DROPPED_TOOLS:
            dropped.append(f"tools[{position}] ({kind})")
        else:
            tools.append(_tool(tool))
    names = [t.name for t in tools]
    if len(set(names)) < len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise Untranslatable(f"two tools named {twice[0]!r} once namespaces are flattened")
    return tools


def _tool(tool: dict[str, Any], namespace: str | None = None) -> FunctionTool:
    if tool.get("type") == "custom" and namespace is None:
        return _freeform(tool)
    if tool.get("type") != "function":
        raise Untranslatable(f"a tool of type {tool.get('type')!r} (only functions translate)")
    not_deferred(tool)
    name = string(tool.get("name"), "a function's name")
    return FunctionTool(
        name=flat_name(namespace, name) if namespace else name,
        description=tool.get("description"),
        parameters=tool.get("parameters") or {"type": "object", "properties": {}},
        strict=tool.get("strict"),
        namespace=namespace,
    )


def _namespace(tool: dict[str, Any]) -> list[FunctionTool]:
    """A namespace's functions, each offered as one function of its own; the namespace's
    description, which no other protocol has a place for, leads each one's."""
    namespace = string(tool.get("name"), "a namespace's name")
    about = tool.get("description")
    functions = [
        _tool(as_dict(entry, "a namespace's tool"), namespace)
        for entry in as_list(tool.get("tools") or [], "a namespace's tools")
    ]
    for function in functions:
        if isinstance(about, str) and about:
            function.description = f"{about}\n\n{function.description or ''}".rstrip()
    return functions


def flat_name(namespace: str, name: str) -> str:
    """A namespaced tool's name for a protocol without namespaces (Codex's own spelling of
    an MCP server's tools, ``mcp__<server>__<tool>``)."""
    return f"{namespace}__{name}"


def _freeform(tool: dict[str, Any]) -> FunctionTool:
    """A custom tool as a function of one string; its grammar, which no other protocol can
    enforce, joins the description so the model still knows the format."""
    description = str(tool.get("description") or "")
    fmt = tool.get("format")
    if isinstance(fmt, dict) and isinstance(fmt.get("definition"), str):
        description += f"\n\nThe input follows this {fmt.get('syntax', '')} grammar:\n"
        description += fmt["definition"]
    return FunctionTool(
        name=string(tool.get("name"), "a custom tool's name"),
        description=description,
        parameters=FREEFORM_PARAMETERS,
        freeform=True,
    )


def _choice(raw: Any) -> Choice | None:
    if raw is None:
        return None
    if raw in ("auto", "none", "required"):
        return Choice(raw)
    if isinstance(raw, dict) and raw.get("type") == "function":
        return Choice("named", string(raw.get("name"), "tool_choice's name"))
    raise Untranslatable(f"tool_choice {raw!r}")


def _json_schema(text: Any) -> dict[str, Any] | None:
    wanted = text.get("format") if isinstance(text, dict) else None
    if not isinstance(wanted, dict):
        return None
    return json_format(wanted.get("type"), wanted, "text.format")


def write_request(request: Request) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for message in request.messages:
        items += _wire_items(message, reply=False)
    # The provider keeps nothing of a translated conversation: the caller sends it whole.
    body: dict[str, Any] = {"model": request.model, "input": items, "store": False}
    if request.system and request.system_role == "developer":
        # Kept a developer message (reasoning models tell it from a system prompt).
        items.insert(
            0, {"type": "message", "role": "developer", "content": text_of(request.system)}
        )
    elif request.system:
        body["instructions"] = text_of(request.system)
    if request.tools:
        body["tools"] = [_wire_tool(t) for t in request.tools]
    if request.choice is not None:
        choice = request.choice
        body["tool_choice"] = (
            {"type": "function", "name": choice.name} if choice.mode == "named" else choice.mode
        )
    if request.parallel_tool_calls is not None and request.tools:
        body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.max_tokens is not None:
        body["max_output_tokens"] = request.max_tokens
    for name, value in (("temperature", request.temperature), ("top_p", request.top_p)):
        if value is not None:
            body[name] = value
    if request.stop:
        raise Untranslatable("stop sequences (Responses has none)")
    if request.json_schema is not None:
        body["text"] = {"format": _wire_format(request.json_schema)}
    if request.reasoning_effort is not None:
        body["reasoning"] = {"effort": request.reasoning_effort}
    return body


def _wire_tool(tool: FunctionTool) -> dict[str, Any]:
    wire: dict[str, Any] = {"type": "function", "name": tool.name, "parameters": tool.parameters}
    if tool.description is not None:
        wire["description"] = tool.description
    # Responses makes functions strict unless told otherwise; other protocols' tools are not.
    wire["strict"] = bool(tool.strict)
    return wire


def _wire_format(json_schema: dict[str, Any]) -> dict[str, Any]:
    if not json_schema:
        return {"type": "json_object"}
    wire = {"type": "json_schema", "name": json_schema["name"], "schema": json_schema["schema"]}
    if json_schema.get("strict") is not None:
        wire["strict"] = json_schema["strict"]
    return wire


def _wire_items(
    message: Message, reply: bool, reshaped: dict[str, FunctionTool] | None = None
) -> list[dict[str, Any]]:
    if message.role != "assistant":
        results = [p for p in message.parts if p["type"] == "tool_result"]
        others = [p for p in message.parts if p["type"] != "tool_result"]
        items = [
            {"type": "function_call_output", "call_id": r["id"], "output": _output(r)}
            for r in results
        ]
        if others:
            role = "developer" if message.role == "system" else "user"
            items.append({"type": "message", "role": role, "content": _wire_content(others)})
        return items
    items = []
    texts: list[Part] = []
    for part in message.parts:
        if part["type"] in ("text", "refusal"):
            texts.append(part)
            continue
        if texts:
            items.append(_assistant_message(texts, reply))
            texts = []
        item = _wire_output(part, reply, reshaped or {})
        if item is not None:
            items.append(item)
    if texts:
        items.append(_assistant_message(texts, reply))
    return items


def _output(result: Part) -> str:
    return result_text(result["content"])


def _wire_content(parts: list[Part]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for part in parts:
        kind = part["type"]
        if kind == "text":
            wire.append({"type": "input_text", "text": part["text"]})
        elif kind == "image":
            wire.append({"type": "input_image", "image_url": data_url(part), "detail": "auto"})
        elif kind == "document":
            file: dict[str, Any] = {"type": "input_file"}
            file["file_data" if "data" in part else "file_url"] = data_url(part)
            if "filename" in part:
                file["filename"] = part["filename"]
            wire.append(file)
        elif kind != "reasoning":
            raise Untranslatable(f"a user part of type {kind!r}")
    return wire


def _assistant_message(parts: list[Part], reply: bool) -> dict[str, Any]:
    content = [
        {"type": "output_text", "text": p["text"], "annotations": []}
        if p["type"] == "text"
        else {"type": "refusal", "refusal": p["text"]}
        for p in parts
    ]
    item: dict[str, Any] = {"type": "message", "role": "assistant", "content": content}
    if reply:
        item.update(id=f"msg_{time.monotonic_ns():x}", status="completed")
    return item


def _wire_output(
    part: Part, reply: bool, reshaped: dict[str, FunctionTool]
) -> dict[str, Any] | None:
    tool = reshaped.get(part["name"]) if part["type"] == "tool_call" else None
    if tool is not None and tool.freeform:
        return _custom_call(part)
    if part["type"] == "tool_call":
        item = {"type": "function_call", "call_id": part["id"], "name": part["name"]}
        if tool is not None and tool.namespace is not None:
            item.update(namespace=tool.namespace, name=tool.own_name)
        item["arguments"] = part["arguments"]
        if reply:
            item.update(id=f"fc_{part['id']}", status="completed")
        return item
    if part["type"] == "reasoning":
        carried = part.get("carried")
        if carried and carried["protocol"] == PROTOCOL:
            return carried["value"]
        if not reply:
            return None  # another model's reasoning: no Responses provider takes it
        item = {
            "type": "reasoning",
            "id": f"rs_{time.monotonic_ns():x}",
            "summary": [{"type": "summary_text", "text": part["text"]}] if part["text"] else [],
        }
        if carried:
            item["encrypted_content"] = wrap_carried(carried)
        return item
    raise Untranslatable(f"an assistant part of type {part['type']!r}")


def _custom_call(part: Part) -> dict[str, Any]:
    """A call of a custom tool, as the client offered it: its input is the one string."""
    try:
        arguments = orjson.loads(part["arguments"])
    except orjson.JSONDecodeError:
        arguments = None
    text = arguments.get("input") if isinstance(arguments, dict) else None
    return {
        "type": "custom_tool_call",
        "id": f"ctc_{part['id']}",
        "status": "completed",
        "call_id": part["id"],
        "name": part["name"],
        "input": text if isinstance(text, str) else part["arguments"],
    }


# --- reply ------------------------------------------------------------------------------------


def read_reply(body: dict[str, Any]) -> Reply:
    if body.get("status") == "failed" or body.get("error"):
        raise Untranslatable(f"a failed response: {body.get('error')}")
    parts: list[Part] = []
    for raw in as_list(body.get("output"), "output"):
        item = as_dict(raw, "an output item")
        kind = item.get("type")
        if kind == "message":
            parts += _parts(item.get("content") or [], -1)
        elif kind == "function_call":
            parts.append(
                {
                    "type": "tool_call",
                    "id": string(item.get("call_id"), "a function_call's call_id"),
                    "name": string(item.get("name"), "a function_call's name"),
                    "arguments": string(item.get("arguments", ""), "arguments"),
                }
            )
        elif kind == "custom_tool_call":
            parts.append(
                {
                    "type": "tool_call",
                    "id": string(item.get("call_id"), "a custom_tool_call's call_id"),
                    "name": string(item.get("name"), "a custom_tool_call's name"),
                    "arguments": orjson.dumps({"input": str(item.get("input", ""))}).decode(),
                }
            )
        elif kind == "reasoning" and (item.get("encrypted_content") or item.get("summary")):
            # Without its encrypted content a reasoning item cannot be sent again (store off).
            parts.append(_reasoning(item))
        # Items the provider ran itself (web_search_call, …) already shaped the text.
    calls = any(p["type"] == "tool_call" for p in parts)
    refused = any(p["type"] == "refusal" for p in parts)
    return Reply(
        id=str(body.get("id") or ""),
        model=body.get("model"),
        parts=parts,
        stop=read_stop(body, calls, refused),
        usage=read_usage(body.get("usage")),
        created=as_int(body.get("created_at")),
    )


def read_stop(response: dict[str, Any], calls: bool, refused: bool) -> Stop:
    """Why a response stopped (whole, or its stream's last event): it calls tools, it is
    incomplete (and why), the model refused, or it ended."""
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    if calls:
        return "tool_calls"
    if response.get("status") == "incomplete":
        return "content_filter" if reason == "content_filter" else "max_tokens"
    return "refusal" if refused else "end"


# An answer that stopped so is ``incomplete``, for this reason.
INCOMPLETE_REASONS: dict[str, str] = {
    "max_tokens": "max_output_tokens",
    "content_filter": "content_filter",
}


def reshaped_tools(request: Request) -> dict[str, FunctionTool]:
    """The caller's tools whose calls go back in a shape of their own (custom tools,
    namespaced functions), by the name the provider saw."""
    return {t.name: t for t in request.tools if t.reshaped}


def read_usage(raw: Any) -> Usage | None:
    return read_openai_usage(raw, "input_tokens", "output_tokens")


def write_usage(usage: Usage) -> dict[str, Any]:
    return write_openai_usage(usage, "input_tokens", "output_tokens")


def write_reply(reply: Reply, request: Request) -> dict[str, Any]:
    output = _wire_items(
        Message("assistant", reply.parts), reply=True, reshaped=reshaped_tools(request)
    )
    reason = INCOMPLETE_REASONS.get(reply.stop)
    incomplete = reason is not None
    return {
        "id": reply.id if reply.id.startswith("resp_") else f"resp_{reply.id}",
        "object": "response",
        "created_at": reply.created or int(time.time()),
        "status": "incomplete" if incomplete else "completed",
        "error": None,
        "incomplete_details": {"reason": reason} if incomplete else None,
        "model": reply.model,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "tool_choice": "auto",
        "tools": [],
        "store": False,
        "usage": write_usage(reply.usage) if reply.usage is not None else None,
    }
