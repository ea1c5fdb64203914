"""A scripted LLM provider for real runners: it decides each answer from the request, since a
runner sends side requests (titles, quota probes, token counts) a fixed queue cannot foresee.

- A request that offers the tool ``tool_name`` and has no result for it yet: call it (symbol
  AAPL).
- A request carrying that tool's result: answer ``QUOTE-OK <what the tool service saw>``.
- Anything else: a short plain answer.

It speaks Anthropic Messages and OpenAI Responses and Chat Completions, each as JSON or as
SSE when the request streams, and records every request it gets.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.support.upstream import Received

PLAIN = "Nothing to look up."
ARGUMENTS = {"symbol": "AAPL"}


@dataclass
class ScriptedProvider:
    tool_names: tuple[str, ...] = ("desk_quote",)
    received: list[Received] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _runner: web.AppRunner | None = None
    url: str = ""

    async def start(self) -> ScriptedProvider:
        app = web.Application(client_max_size=1 << 26)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def tool_calls_sent(self) -> int:
        """How many answers asked for the tool."""
        return sum(1 for r in self.received if _asked_for_tool(r))

    # --- shared -----------------------------------------------------------------------------

    async def _record(self, request: web.Request) -> dict[str, Any]:
        body = await request.read()
        self.received.append(
            Received(request.method, request.path, request.headers, body, request.raw_path)
        )
        return orjson.loads(body) if body else {}

    def _offered(self, tools: list[dict[str, Any]]) -> str | None:
        return next(iter(self._offered_in(tools)), None)

    def _offered_in(self, tools: list[dict[str, Any]], namespace: str = "") -> list[str]:
        """The tool's name as offered; a Responses ``namespace`` tool (Codex's MCP servers)
        nests its tools, and a call names them ``namespace.tool``."""
        found = []
        for tool in tools or []:
            if tool.get("type") == "namespace":
                found += self._offered_in(tool.get("tools") or [], tool.get("name", ""))
                continue
            name = tool.get("name") or (tool.get("function") or {}).get("name")
            if name in self.tool_names:
                found.append(f"{namespace}.{name}" if namespace else name)
        return found

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids)}"

    async def _unknown(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response({"error": {"message": "not scripted", "type": "x"}}, status=404)

    # --- Anthropic --------------------------------------------------------------------------

    async def _count_tokens(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response({"input_tokens": 42})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        tool = self._offered(body.get("tools") or [])
        result = _anthropic_result(body.get("messages") or [])
        if result is not None:
            content = [{"type": "text", "text": f"QUOTE-OK {result}"}]
            stop = "end_turn"
        elif tool is not None:
            block = {"type": "tool_use", "id": self._next_id("toolu"), "name": tool}
            content = [{**block, "input": ARGUMENTS}]
            stop = "tool_use"
        else:
            content = [{"type": "text", "text": PLAIN}]
            stop = "end_turn"
        message = {
            "id": self._next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 20, "output_tokens": 5},
        }
        if not body.get("stream"):
            return web.json_response(message)
        return await _sse(request, _anthropic_events(message))

    # --- OpenAI Responses -------------------------------------------------------------------

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        tool = self._offered(body.get("tools") or [])
        items = body.get("input")
        result = _responses_result(items if isinstance(items, list) else [])
        if result is not None:
            output = [_responses_message(self._next_id("msg"), f"QUOTE-OK {result}")]
        elif tool is not None:
            namespace, _, name = tool.rpartition(".")
            call = {
                "type": "function_call",
                "id": self._next_id("fc"),
                "call_id": self._next_id("call"),
                **({"namespace": namespace} if namespace else {}),
                "name": name,
                "arguments": orjson.dumps(ARGUMENTS).decode(),
                "status": "completed",
            }
            output = [call]
        else:
            output = [_responses_message(self._next_id("msg"), PLAIN)]
        response = {
            "id": self._next_id("resp"),
            "object": "response",
            "created_at": 1700000000,
            "status": "completed",
            "model": body.get("model", "gpt"),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 20,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 25,
            },
        }
        if not body.get("stream"):
            return web.json_response(response)
        return await _sse(request, _responses_events(response))

    # --- OpenAI Chat Completions ------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        tool = self._offered(body.get("tools") or [])
        result = _chat_result(body.get("messages") or [])
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if result is not None:
            message["content"] = f"QUOTE-OK {result}"
            finish = "stop"
        elif tool is not None:
            message["tool_calls"] = [
                {
                    "id": self._next_id("call"),
                    "type": "function",
                    "function": {"name": tool, "arguments": orjson.dumps(ARGUMENTS).decode()},
                }
            ]
            finish = "tool_calls"
        else:
            message["content"] = PLAIN
            finish = "stop"
        completion = {
            "id": self._next_id("chatcmpl"),
            "object": "chat.completion",
            "created": 1700000000,
            "model": body.get("model", "gpt"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }
        if not body.get("stream"):
            return web.json_response(completion)
        return await _sse(request, _chat_events(completion))


# --- what came back from the tool -------------------------------------------------------------


def _seen_by_service(text: str) -> str:
    """The path the tool service saw, from the sidecar's result envelope (or MCP's text)."""
    try:  # runners may wrap the result in notes of their own (Codex: wall time first)
        envelope, _ = json.JSONDecoder().raw_decode(text[text.index("{") :])
    except ValueError:
        return text[:200]
    data = envelope.get("data", envelope) if isinstance(envelope, dict) else envelope
    return str(data.get("path")) if isinstance(data, dict) and "path" in data else text[:200]


def _text_of(content: Any) -> str:
    """A result's text; of several blocks the first (runners append reminders after it)."""
    if isinstance(content, str):
        return content
    texts = [b.get("text", "") for b in content or [] if isinstance(b, dict) and "text" in b]
    return texts[0] if texts else ""


def _anthropic_result(messages: list[dict[str, Any]]) -> str | None:
    last = messages[-1] if messages else {}
    for block in last.get("content") or [] if isinstance(last.get("content"), list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            return _seen_by_service(_text_of(block.get("content")))
    return None


def _responses_result(items: list[dict[str, Any]]) -> str | None:
    outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
    if not outputs or items[-1] is not outputs[-1]:
        return None
    return _seen_by_service(_text_of(outputs[-1].get("output")))


def _chat_result(messages: list[dict[str, Any]]) -> str | None:
    last = messages[-1] if messages else {}
    return _seen_by_service(_text_of(last.get("content"))) if last.get("role") == "tool" else None


def _asked_for_tool(received: Received) -> bool:
    return b'"tool_use"' in received.body or b'"function_call"' in received.body


# --- streams ----------------------------------------------------------------------------------


async def _sse(request: web.Request, events: list[tuple[str | None, dict[str, Any] | str]]):
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for name, payload in events:
        data = payload if isinstance(payload, str) else orjson.dumps(payload).decode()
        head = f"event: {name}\n" if name else ""
        await response.write(f"{head}data: {data}\n\n".encode())
    await response.write_eof()
    return response


def _anthropic_events(message: dict[str, Any]) -> list[tuple[str | None, Any]]:
    start = {**message, "content": [], "stop_reason": None}
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opening, delta = (
                {"type": "text", "text": ""},
                {"type": "text_delta", "text": block["text"]},
            )
        else:
            opening = {**block, "input": {}}
            delta = {
                "type": "input_json_delta",
                "partial_json": orjson.dumps(block["input"]).decode(),
            }
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            )
        )
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append(
        ("message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": 5}})
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _responses_message(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _responses_events(response: dict[str, Any]) -> list[tuple[str | None, Any]]:
    numbers = itertools.count()
    started = {**response, "status": "in_progress", "output": [], "usage": None}

    def event(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        return kind, {"type": kind, "sequence_number": next(numbers), **fields}

    events = [event("response.created", response=started)]
    for index, item in enumerate(response["output"]):
        events.append(event("response.output_item.added", output_index=index, item=item))
        events.append(event("response.output_item.done", output_index=index, item=item))
    events.append(event("response.completed", response=response))
    return events


def _chat_events(completion: dict[str, Any]) -> list[tuple[str | None, Any]]:
    base = {k: completion[k] for k in ("id", "created", "model")} | {
        "object": "chat.completion.chunk"
    }
    choice = completion["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": 0, **message["tool_calls"][0]}]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    return [*((None, c) for c in chunks), (None, "[DONE]")]
