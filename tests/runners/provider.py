"""A scripted LLM provider for real runners: it decides each answer from the request, since a
runner sends side requests (titles, quota probes, token counts) a fixed queue cannot foresee.

It follows a plan of tool calls (by base name: ``desk_quote`` also matches an MCP runner's
``mcp__clawpod__desk_quote``). Each answer calls the first planned tool whose result is not in
the conversation yet, if the request offers it; once every planned tool has a result it answers
``QUOTE-OK <path the quote service saw>`` (plus ``NOTE-OK`` when a note tool ran); a request
that offers none of it (a title, a quota probe) gets a short plain answer.

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
QUOTE = "desk_quote"
TRADE = "desk_trade"  # a destructive tool: the retry cases count its orders
NOTE = "record_note"  # the runner's own tool in the cases that have one
RUNNER_MARK = "ran-by-the-runner"
NARRATION = "Let me do that."  # what a runner's own shell tool prints when it runs
ARGUMENTS = {
    QUOTE: {"symbol": "AAPL"},
    TRADE: {"symbol": "AAPL", "side": "buy", "quantity": 1},
    NOTE: {"text": "AAPL checked"},
    # The runners' own shell tools (Claude Code's Bash, Codex's exec_command): a harmless
    # command whose output proves the runner ran it.
    "Bash": {"command": f"echo {RUNNER_MARK}", "description": "Print a marker"},
    "exec_command": {"cmd": f"echo {RUNNER_MARK}"},
}


@dataclass
class ScriptedProvider:
    plan: tuple[str, ...] | list[str] = (QUOTE,)
    failures: int = 0
    """How many requests that carry every planned result (the model call after the tools ran)
    are answered 503 before one is answered: a provider failing after the order."""
    narrate: bool = False
    """Call turns carry text before their call (``NARRATION``), as models often do."""
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

    # --- the plan ---------------------------------------------------------------------------

    def _decide(self, offered: list[str], results: dict[str, str]) -> tuple[str, str | None]:
        """("call", offered name) or ("answer", text)."""
        for planned in self.plan:
            if _base(planned) in {_base(name) for name in results}:
                continue
            match = next((o for o in offered if _base(o) == planned), None)
            if match is None:
                return "answer", PLAIN
            return "call", match
        if self.failures > 0:
            self.failures -= 1
            return "fail", None
        quote = next((text for name, text in results.items() if _base(name) == QUOTE), "")
        answer = f"QUOTE-OK {_seen_by_service(quote)}" if quote else "DONE"
        if any(_base(name) == NOTE for name in results):
            answer += " NOTE-OK"
        if any(_base(name) == TRADE for name in results):
            answer += " TRADE-OK"
        if any(RUNNER_MARK in text for text in results.values()):
            answer += " RUNNER-OK"
        return "answer", answer

    # --- shared -----------------------------------------------------------------------------

    async def _record(self, request: web.Request) -> dict[str, Any]:
        body = await request.read()
        self.received.append(
            Received(request.method, request.path, request.headers, body, request.raw_path)
        )
        return orjson.loads(body) if body else {}

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
        messages = body.get("messages") or []
        kind, value = self._decide(_offered(body.get("tools")), _anthropic_results(messages))
        if kind == "fail":
            return _failure({"type": "error", "error": {"type": "api_error", "message": "down"}})
        if kind == "call":
            block = {"type": "tool_use", "id": self._next_id("toolu"), "name": value}
            content = [{**block, "input": ARGUMENTS[_base(value)]}]
            stop = "tool_use"
        else:
            content = [{"type": "text", "text": value}]
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
        items = body.get("input") if isinstance(body.get("input"), list) else []
        kind, value = self._decide(_offered(body.get("tools")), _responses_results(items))
        if kind == "fail":
            return _failure({"error": {"message": "down", "type": "server_error"}})
        if kind == "call":
            namespace, _, name = value.rpartition(".")
            call = {
                "type": "function_call",
                "id": self._next_id("fc"),
                "call_id": self._next_id("call"),
                **({"namespace": namespace} if namespace else {}),
                "name": name,
                "arguments": orjson.dumps(ARGUMENTS[_base(value)]).decode(),
                "status": "completed",
            }
            output = [call]
            if self.narrate:
                output.insert(0, _responses_message(self._next_id("msg"), NARRATION))
        else:
            output = [_responses_message(self._next_id("msg"), value)]
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
        messages = body.get("messages") or []
        kind, value = self._decide(_offered(body.get("tools")), _chat_results(messages))
        if kind == "fail":
            return _failure({"error": {"message": "down", "type": "server_error"}})
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if kind == "call":
            arguments = orjson.dumps(ARGUMENTS[_base(value)]).decode()
            message["tool_calls"] = [
                {
                    "id": self._next_id("call"),
                    "type": "function",
                    "function": {"name": value, "arguments": arguments},
                }
            ]
            finish = "tool_calls"
            message["content"] = NARRATION if self.narrate else None
        else:
            message["content"] = value
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


def _failure(body: dict[str, Any]) -> web.Response:
    # 503, not 500: the sidecar retries a streamed call with tools that a provider answers 500
    # as a whole call (stream-tools, §7.4), and the runner's own retry would not be exercised.
    return web.json_response(body, status=503)


# --- reading requests -------------------------------------------------------------------------


def _base(name: str) -> str:
    """A tool's base name: MCP runners prefix it (``mcp__clawpod__``, ``namespace.``)."""
    for known in (QUOTE, TRADE, NOTE):
        if name.endswith(known):
            return known
    return name


def _offered(tools: Any, namespace: str = "") -> list[str]:
    """Tool names as a call must name them; a Responses ``namespace`` tool (Codex's MCP
    servers) nests its tools, called as ``namespace.tool``."""
    names = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            names += _offered(tool.get("tools"), tool.get("name", ""))
            continue
        name = tool.get("name") or (tool.get("function") or {}).get("name")
        if isinstance(name, str):
            names.append(f"{namespace}.{name}" if namespace else name)
    return names


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


def _anthropic_results(messages: list[dict[str, Any]]) -> dict[str, str]:
    names: dict[str, str] = {}
    results: dict[str, str] = {}
    for message in messages:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                names[block.get("id", "")] = block.get("name", "")
            elif block.get("type") == "tool_result":
                name = names.get(block.get("tool_use_id", ""), "")
                results[name] = _text_of(block.get("content"))
    return results


def _responses_results(items: list[Any]) -> dict[str, str]:
    names: dict[str, str] = {}
    results: dict[str, str] = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            names[item.get("call_id", "")] = item.get("name", "")
        elif item.get("type") == "function_call_output":
            results[names.get(item.get("call_id", ""), "")] = _text_of(item.get("output"))
    return results


def _chat_results(messages: list[dict[str, Any]]) -> dict[str, str]:
    names: dict[str, str] = {}
    results: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            names[call.get("id", "")] = (call.get("function") or {}).get("name", "")
        if message.get("role") == "tool":
            results[names.get(message.get("tool_call_id", ""), "")] = _text_of(
                message.get("content")
            )
    return results


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
