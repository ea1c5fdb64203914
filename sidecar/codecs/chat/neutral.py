"""Chat Completions bodies read into the neutral shape (``model/neutral.py``) and written from it:
this protocol's side of translation."""

from __future__ import annotations

import time
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
    arguments_text,
    as_dict,
    as_list,
    data_url,
    from_url,
    json_format,
    not_deferred,
    read_openai_usage,
    result_text,
    stop_list,
    string,
    write_openai_usage,
)

# Fields read into the request (beyond messages, tools and choice).
MAPPED = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "stream",
        "stream_options",
        "response_format",
        "reasoning_effort",
    }
)
# Fields dropped: hints, identities and options with no counterpart whose absence does not
# change what the caller gets back (docs/translation.md lists each and why).
DROPPED = frozenset(
    {
        "user",
        "metadata",
        "store",
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "prediction",
        "verbosity",
    }
)
# Fields whose value changes what comes back: refused unless off.
REFUSED = {
    "n": lambda v: v not in (None, 1),
    "logprobs": lambda v: bool(v),
    "top_logprobs": lambda v: v is not None,
    "audio": lambda v: v is not None,
    "modalities": lambda v: v not in (None, ["text"]),
    "web_search_options": lambda v: v is not None,
}
_REFUSABLE = frozenset(REFUSED)
_SYSTEM_ROLES = ("system", "developer")
FINISH_TO_STOP: dict[Any, Stop] = {
    "stop": "end",
    "length": "max_tokens",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}
STOP_TO_FINISH = {
    "end": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "refusal": "content_filter",
}


# --- request ----------------------------------------------------------------------------------


def read_request(body: dict[str, Any]) -> tuple[Request, list[str]]:
    """The request, and the names of the fields dropped."""
    dropped = _check_fields(body)
    messages: list[Message] = []
    system: list[Part] = []
    system_role = "system"
    for position, raw in enumerate(as_list(body.get("messages"), "messages")):
        message = as_dict(raw, "a message")
        role = message.get("role")
        if role in _SYSTEM_ROLES:
            system_role = role if not (system or messages) else system_role
            parts = _user_parts(message.get("content"), position)
            if messages:
                messages.append(Message("system", parts))
            else:
                system += [{"type": "text", "text": "\n\n"}, *parts] if system else parts
        elif role == "user":
            messages.append(Message("user", _user_parts(message.get("content"), position)))
        elif role == "assistant":
            messages.append(Message("assistant", _assistant_parts(message)))
        elif role in ("tool", "function"):
            messages.append(Message("user", [_tool_result(message, messages)]))
        else:
            raise Untranslatable(f"messages[{position}]: role {role!r}")
    functions = body.get("functions")
    raw_tools = body.get("tools")
    tools = [_tool(t) for t in raw_tools] if raw_tools else []
    if functions:
        tools += [_function(f) for f in functions]
    choice = body.get("tool_choice")
    if choice is None and body.get("function_call") is not None:
        choice = _legacy_choice(body["function_call"])
    # Positional, in Request's field order: a keyword call of a dataclass of this many
    # fields costs twice as much, on every request.
    request = Request(
        body.get("model"),
        system,
        messages,
        tools,
        _choice(choice),
        body.get("parallel_tool_calls"),
        body.get("max_completion_tokens") or body.get("max_tokens"),
        body.get("temperature"),
        body.get("top_p"),
        stop_list(body.get("stop")),
        body.get("stream") is True,
        _json_schema(body.get("response_format")),
        body.get("reasoning_effort"),
        functions is not None or body.get("function_call") is not None,  # legacy_functions
        system_role,
    )
    return request, dropped


def _check_fields(body: dict[str, Any]) -> list[str]:
    if not _REFUSABLE.isdisjoint(body):  # one scan in C, most bodies have none
        for name in REFUSED.keys() & body.keys():
            if REFUSED[name](body[name]):
                raise Untranslatable(f"{name}: {body[name]!r}")
    return [] if MAPPED.issuperset(body) else [name for name in body if name not in MAPPED]


def _user_parts(content: Any, position: int) -> list[Part]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if content is None:
        return []
    parts: list[Part] = []
    for raw in as_list(content, "a message's content"):
        part = as_dict(raw, "a content part")
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": string(part.get("text"), "a text part")})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            parts.append(from_url("image", url))
        elif kind == "file":
            parts.append(_file(as_dict(part.get("file"), "a file part")))
        elif kind == "refusal":
            parts.append({"type": "refusal", "text": str(part.get("refusal", ""))})
        else:
            raise Untranslatable(f"messages[{position}]: a content part of type {kind!r}")
    return parts


def _file(file: dict[str, Any]) -> Part:
    if "file_data" not in file:
        raise Untranslatable("a file part by file_id (the provider's stored file)")
    data = file["file_data"]
    extra = {"filename": file["filename"]} if isinstance(file.get("filename"), str) else {}
    if isinstance(data, str) and not data.startswith("data:"):
        # The Chat API takes bare base64 here; PDF is the one type it documents.
        return {"type": "document", "media_type": "application/pdf", "data": data, **extra}
    return from_url("document", data, **extra)


def _assistant_parts(message: dict[str, Any]) -> list[Part]:
    parts: list[Part] = []
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        parts.append({"type": "reasoning", "text": reasoning})
    content = message.get("content")
    if isinstance(content, list):
        parts += [p for p in _user_parts(content, -1) if p["type"] in ("text", "refusal")]
    elif isinstance(content, str) and content:
        parts.append({"type": "text", "text": content})
    if isinstance(message.get("refusal"), str):
        parts.append({"type": "refusal", "text": message["refusal"]})
    calls = message.get("tool_calls")
    for raw in as_list(calls, "tool_calls") if calls else ():
        call = as_dict(raw, "a tool call")
        function = as_dict(call.get("function"), "a tool call's function")
        parts.append(
            {
                "type": "tool_call",
                "id": string(call.get("id"), "a tool call's id"),
                "name": string(function.get("name"), "a tool call's name"),
                "arguments": arguments_text(function.get("arguments")),
            }
        )
    legacy = message.get("function_call")
    if not calls and isinstance(legacy, dict):
        parts.append(
            {
                "type": "tool_call",
                "id": _legacy_id(legacy),
                "name": str(legacy.get("name", "")),
                "arguments": arguments_text(legacy.get("arguments")),
            }
        )
    return parts


def _legacy_id(function_call: dict[str, Any]) -> str:
    return f"call_{function_call.get('name', 'function')}"


def _tool_result(message: dict[str, Any], before: list[Message]) -> Part:
    call_id = message.get("tool_call_id")
    if message.get("role") == "function":
        # A legacy result answers the last legacy call, which has no id of its own.
        call_id = _legacy_id({"name": message.get("name", "function")})
    content = message.get("content")
    parts = _user_parts(content, -1) if content is not None else []
    return {
        "type": "tool_result",
        "id": string(call_id, "a tool message's tool_call_id"),
        "content": [p for p in parts if p["type"] in ("text", "image")],
        "is_error": False,
    }


def _tool(raw: Any) -> FunctionTool:
    tool = as_dict(raw, "a tool")
    if tool.get("type", "function") != "function":
        raise Untranslatable(f"a tool of type {tool.get('type')!r} (only functions translate)")
    return _function(not_deferred(as_dict(tool.get("function"), "a function"), tool))


def _function(raw: Any) -> FunctionTool:
    function = as_dict(raw, "a function")
    return FunctionTool(
        name=string(function.get("name"), "a function's name"),
        description=function.get("description"),
        parameters=function.get("parameters") or {"type": "object", "properties": {}},
        strict=function.get("strict"),
    )


def _legacy_choice(function_call: Any) -> Any:
    if isinstance(function_call, dict):
        return {"type": "function", "function": {"name": function_call.get("name")}}
    return function_call


def _choice(raw: Any) -> Choice | None:
    if raw is None:
        return None
    if raw in ("auto", "none", "required"):
        return Choice(raw)
    if isinstance(raw, dict) and raw.get("type") == "function":
        name = (raw.get("function") or {}).get("name")
        return Choice("named", string(name, "tool_choice's function name"))
    raise Untranslatable(f"tool_choice {raw!r}")


def _json_schema(response_format: Any) -> dict[str, Any] | None:
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    return json_format(kind, response_format.get("json_schema"), "response_format")


def write_request(request: Request) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": request.system_role, "content": text_of(request.system)})
    for message in request.messages:
        parts = message.parts
        if len(parts) == 1 and parts[0]["type"] == "text":  # most turns: no call, no list
            messages.append({"role": message.role, "content": parts[0]["text"]})
        else:
            messages += _wire_messages(message)
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [
            {"type": "function", "function": _function_definition(t)} for t in request.tools
        ]
    if request.choice is not None:
        body["tool_choice"] = _wire_choice(request.choice)
    if request.parallel_tool_calls is not None and request.tools:
        body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.max_tokens is not None:
        body["max_completion_tokens"] = request.max_tokens
    _put(body, "temperature", request.temperature)
    _put(body, "top_p", request.top_p)
    if request.stop:
        body["stop"] = request.stop
    if request.json_schema is not None:
        body["response_format"] = _wire_format(request.json_schema)
    _put(body, "reasoning_effort", request.reasoning_effort)
    return body


def _put(body: dict[str, Any], name: str, value: Any) -> None:
    if value is not None:
        body[name] = value


def _function_definition(tool: FunctionTool) -> dict[str, Any]:
    definition: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters}
    if tool.description is not None:
        definition["description"] = tool.description
    if tool.strict is not None:
        definition["strict"] = tool.strict
    return definition


def _wire_choice(choice: Choice) -> Any:
    if choice.mode == "named":
        return {"type": "function", "function": {"name": choice.name}}
    return choice.mode


def _wire_format(json_schema: dict[str, Any]) -> dict[str, Any]:
    if not json_schema:
        return {"type": "json_object"}
    schema = {"name": json_schema["name"], "schema": json_schema["schema"]}
    if json_schema.get("strict") is not None:
        schema["strict"] = json_schema["strict"]
    return {"type": "json_schema", "json_schema": schema}


def _wire_messages(message: Message) -> list[dict[str, Any]]:
    """A turn other than one text (``write_request`` writes those itself)."""
    parts = message.parts
    if message.role == "assistant":
        return [_wire_assistant(parts)]
    role = "system" if message.role == "system" else "user"
    results = [p for p in message.parts if p["type"] == "tool_result"]
    others = [p for p in message.parts if p["type"] != "tool_result"]
    wire = [
        {"role": "tool", "tool_call_id": r["id"], "content": result_text(r["content"])}
        for r in results
    ]
    if others or not results:
        wire.append({"role": role, "content": _wire_content(others)})
    return wire


def _wire_content(parts: list[Part]) -> str | list[dict[str, Any]]:
    if all(p["type"] == "text" for p in parts):
        return text_of(parts)
    wire: list[dict[str, Any]] = []
    for part in parts:
        kind = part["type"]
        if kind == "text":
            wire.append({"type": "text", "text": part["text"]})
        elif kind == "image":
            wire.append({"type": "image_url", "image_url": {"url": data_url(part)}})
        elif kind == "document":
            if "data" not in part:
                raise Untranslatable("a document by URL (Chat Completions takes files inline)")
            file = {"file_data": data_url(part)}
            if "filename" in part:
                file["filename"] = part["filename"]
            wire.append({"type": "file", "file": file})
        elif kind != "reasoning":
            raise Untranslatable(f"a user part of type {kind!r}")
    return wire


def _wire_assistant(parts: list[Part]) -> dict[str, Any]:
    # Reasoning has no place in a Chat request: it is dropped (docs/translation.md).
    message: dict[str, Any] = {"role": "assistant", "content": text_of(parts)}
    refusals = [p["text"] for p in parts if p["type"] == "refusal"]
    if refusals:
        message["refusal"] = "".join(refusals)
    calls = [p for p in parts if p["type"] == "tool_call"]
    if calls:
        message["tool_calls"] = _wire_calls(calls)
    return message


def _wire_calls(calls: list[Part]) -> list[dict[str, Any]]:
    return [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for c in calls
    ]


# --- reply ------------------------------------------------------------------------------------


def read_reply(body: dict[str, Any]) -> Reply:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise Untranslatable("a reply without choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise Untranslatable("a choice without a message")
    parts = _assistant_parts(message)
    # Some servers never say tool_calls (OpenRouter streams finish_reason null).
    calls = message.get("tool_calls") or message.get("function_call")
    stop = "tool_calls" if calls else FINISH_TO_STOP.get(choice.get("finish_reason"), "end")
    return Reply(
        str(body.get("id") or ""),
        body.get("model"),
        parts,
        stop,
        read_usage(body.get("usage")),
        as_int(body.get("created")),
    )


def read_usage(raw: Any) -> Usage | None:
    return read_openai_usage(raw, "prompt_tokens", "completion_tokens")


def write_usage(usage: Usage) -> dict[str, Any]:
    return write_openai_usage(usage, "prompt_tokens", "completion_tokens")


def write_reply(reply: Reply, request: Request) -> dict[str, Any]:
    text = text_of(reply.parts)
    calls = [p for p in reply.parts if p["type"] == "tool_call"]
    refusals = [p["text"] for p in reply.parts if p["type"] == "refusal"]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text if text or not (calls or refusals) else None,
        "refusal": "".join(refusals) or None,
    }
    finish = STOP_TO_FINISH[reply.stop]
    if calls and request.legacy_functions:
        first = calls[0]
        message["function_call"] = {"name": first["name"], "arguments": first["arguments"]}
        finish = "function_call"
    elif calls:
        message["tool_calls"] = _wire_calls(calls)
    body: dict[str, Any] = {
        "id": reply.id if reply.id.startswith("chatcmpl") else f"chatcmpl-{reply.id}",
        "object": "chat.completion",
        "created": reply.created or int(time.time()),
        "model": reply.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }
    if reply.usage is not None:
        body["usage"] = write_usage(reply.usage)
    return body
