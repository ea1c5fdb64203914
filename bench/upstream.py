"""An LLM upstream that answers instantly, for OpenAI Chat Completions and Responses and
Anthropic Messages.

Answers are realistic in shape and size (a ~600-byte text answer; streams of 200 SSE chunks)
and pre-encoded per model name, so the stub spends as little CPU as aiohttp allows.

The model name scripts the conversation:
- ``...-r<N>`` (e.g. ``gpt-bench-r3``): while the request carries fewer than N tool results,
  answer with one call to the last tool in the request's ``tools`` (arguments differ per round,
  so no call is a duplicate); then answer with text. This drives the sidecar's mediated loop.
- ``...-slow``: streams pace their chunks (``SLOW_CHUNK_INTERVAL_S``), so many streams stay
  open at once (memory measurement).
- ``...-gap``: streams pause ``FIRST_CHUNK_GAP_S`` after the first chunk, then send the rest at
  once. Time to first byte then measures how fast a proxy relays the first chunk, not how long
  it waits for CPU while the stub bursts the other 199 (as a real model, which spaces its
  chunks, never does).
- anything else: answer with text at once, or, when the stub runs with ``--pause-ms N``, pause
  N ms after each chunk of every stream (a model streaming at its own pace: a proxy then reads
  each event on its own, the same way for every proxy, however fast it is).
The Responses route answers text only (the bench translates to it; it scripts no rounds).
"""

from __future__ import annotations

import asyncio
import re
from functools import cache

import orjson
from aiohttp import web

from bench.stubserver import TrafficCounter, host_port_args, serve

STREAM_CHUNKS = 200
SLOW_CHUNK_INTERVAL_S = 0.02
FIRST_CHUNK_GAP_S = 0.005
ANSWER_WORDS = ("The", " quarterly", " figures", " show", " steady", " growth", ",", " with")
ANSWER_TEXT = "".join(ANSWER_WORDS) * 12
ROUNDS_PATTERN = re.compile(r"-r(\d+)$")
USAGE_OPENAI = {
    "prompt_tokens": 412,
    "completion_tokens": 137,
    "total_tokens": 549,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}
USAGE_ANTHROPIC = {
    "input_tokens": 412,
    "output_tokens": 137,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def scripted_rounds(model: str) -> int:
    match = ROUNDS_PATTERN.search(model)
    return int(match.group(1)) if match else 0


# --- OpenAI -------------------------------------------------------------------------------


def _openai_completion(model: str, message: dict, finish_reason: str) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-bench0001",
            "object": "chat.completion",
            "created": 1767225600,
            "model": model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
            ],
            "usage": USAGE_OPENAI,
            "service_tier": "default",
            "system_fingerprint": "fp_bench",
        }
    )


@cache
def openai_text(model: str) -> bytes:
    message = {"role": "assistant", "content": ANSWER_TEXT, "refusal": None, "annotations": []}
    return _openai_completion(model, message, "stop")


def openai_tool_call(model: str, tool: str, round_no: int) -> bytes:
    call = {
        "id": f"call_bench_{round_no}",
        "type": "function",
        "function": {"name": tool, "arguments": f'{{"q":"round-{round_no}"}}'},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}
    return _openai_completion(model, message, "tool_calls")


@cache
def openai_stream(model: str, include_usage: bool) -> tuple[bytes, ...]:
    def chunk(delta: dict, finish_reason: str | None = None) -> bytes:
        body = {
            "id": "chatcmpl-bench0001",
            "object": "chat.completion.chunk",
            "created": 1767225600,
            "model": model,
            "service_tier": "default",
            "system_fingerprint": "fp_bench",
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
            "obfuscation": "xY3k",
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
    for index in range(STREAM_CHUNKS - 2):
        chunks.append(chunk({"content": ANSWER_WORDS[index % len(ANSWER_WORDS)]}))
    chunks.append(chunk({}, "stop"))
    if include_usage:
        usage = {"id": "chatcmpl-bench0001", "object": "chat.completion.chunk", "choices": []}
        chunks.append(b"data: " + orjson.dumps({**usage, "usage": USAGE_OPENAI}) + b"\n\n")
    chunks.append(b"data: [DONE]\n\n")
    return tuple(chunks)


def count_openai_tool_results(body: dict) -> int:
    return sum(1 for message in body.get("messages") or () if message.get("role") == "tool")


def last_openai_tool(body: dict) -> str | None:
    tools = body.get("tools") or ()
    return tools[-1]["function"]["name"] if tools else None


# --- Anthropic ----------------------------------------------------------------------------


def _anthropic_message(model: str, content: list, stop_reason: str) -> bytes:
    return orjson.dumps(
        {
            "id": "msg_bench0001",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": USAGE_ANTHROPIC,
        }
    )


@cache
def anthropic_text(model: str) -> bytes:
    return _anthropic_message(model, [{"type": "text", "text": ANSWER_TEXT}], "end_turn")


def anthropic_tool_use(model: str, tool: str, round_no: int) -> bytes:
    block = {
        "type": "tool_use",
        "id": f"toolu_bench_{round_no}",
        "name": tool,
        "input": {"q": f"round-{round_no}"},
    }
    return _anthropic_message(model, [block], "tool_use")


@cache
def anthropic_stream(model: str) -> tuple[bytes, ...]:
    def event(name: str, data: dict) -> bytes:
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    start = {
        "id": "msg_bench0001",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**USAGE_ANTHROPIC, "output_tokens": 1},
    }
    events = [
        event("message_start", {"type": "message_start", "message": start}),
        event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        event("ping", {"type": "ping"}),
    ]
    for index in range(STREAM_CHUNKS - 6):
        delta = {"type": "text_delta", "text": ANSWER_WORDS[index % len(ANSWER_WORDS)]}
        events.append(
            event(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        )
    events += [
        event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 137},
            },
        ),
        event("message_stop", {"type": "message_stop"}),
    ]
    return tuple(events)


def count_anthropic_tool_results(body: dict) -> int:
    count = 0
    for message in body.get("messages") or ():
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            count += sum(1 for block in content if block.get("type") == "tool_result")
    return count


def last_anthropic_tool(body: dict) -> str | None:
    tools = body.get("tools") or ()
    return tools[-1]["name"] if tools else None


# --- OpenAI Responses ---------------------------------------------------------------------

USAGE_RESPONSES = {
    "input_tokens": 412,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 137,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 549,
}
RESPONSES_MESSAGE_ID = "msg_bench0001"


def _responses_body(model: str, status: str, output: list, usage: dict | None) -> dict:
    return {
        "id": "resp_bench0001",
        "object": "response",
        "created_at": 1767225600,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "store": False,
        "usage": usage,
    }


def _responses_message(text: str, status: str = "completed") -> dict:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "id": RESPONSES_MESSAGE_ID,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [part],
    }


@cache
def responses_text(model: str) -> bytes:
    message = _responses_message(ANSWER_TEXT)
    return orjson.dumps(_responses_body(model, "completed", [message], USAGE_RESPONSES))


@cache
def responses_stream(model: str) -> tuple[bytes, ...]:
    """The documented event order, ``sequence_number`` counting from 0: 200 events, 192 of
    them text deltas."""
    events: list[bytes] = []

    def emit(kind: str, **payload: object) -> None:
        data = {"type": kind, **payload, "sequence_number": len(events)}
        events.append(b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n")

    words = [ANSWER_WORDS[i % len(ANSWER_WORDS)] for i in range(STREAM_CHUNKS - 8)]
    text = "".join(words)
    at = {"item_id": RESPONSES_MESSAGE_ID, "output_index": 0, "content_index": 0}
    emit("response.created", response=_responses_body(model, "in_progress", [], None))
    emit("response.in_progress", response=_responses_body(model, "in_progress", [], None))
    opened = {**_responses_message("", "in_progress"), "content": []}
    emit("response.output_item.added", output_index=0, item=opened)
    empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    emit("response.content_part.added", **at, part=empty)
    for word in words:
        emit("response.output_text.delta", **at, delta=word, logprobs=[], obfuscation="xY3k")
    emit("response.output_text.done", **at, text=text, logprobs=[])
    emit("response.content_part.done", **at, part={**empty, "text": text})
    done = _responses_message(text)
    emit("response.output_item.done", output_index=0, item=done)
    completed = _responses_body(model, "completed", [done], USAGE_RESPONSES)
    emit("response.completed", response=completed)
    return tuple(events)


# --- handlers -----------------------------------------------------------------------------


def _pacing(model: str, pause: float) -> tuple[float, float]:
    """(pause after the first chunk, pause after each later chunk) in seconds; ``pause``: the
    stub's own, for every other model."""
    if model.endswith("-slow"):
        return SLOW_CHUNK_INTERVAL_S, SLOW_CHUNK_INTERVAL_S
    if model.endswith("-gap"):
        return FIRST_CHUNK_GAP_S, 0.0
    return pause, pause


async def _stream(
    request: web.Request, chunks: tuple[bytes, ...], model: str
) -> web.StreamResponse:
    first_pause, pause = _pacing(model, request.app[PAUSE])
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    for index, chunk in enumerate(chunks):
        await response.write(chunk)
        delay = first_pause if index == 0 else pause
        if delay:
            await asyncio.sleep(delay)
    await response.write_eof()
    return response


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = orjson.loads(await request.read())
    model = body.get("model", "gpt-bench")
    rounds = scripted_rounds(model)
    tool = last_openai_tool(body)
    if rounds and tool:
        done = count_openai_tool_results(body)
        if done < rounds:
            return _json(openai_tool_call(model, tool, done + 1))
    if body.get("stream"):
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return await _stream(request, openai_stream(model, include_usage), model)
    return _json(openai_text(model))


async def messages(request: web.Request) -> web.StreamResponse:
    body = orjson.loads(await request.read())
    model = body.get("model", "claude-bench")
    rounds = scripted_rounds(model)
    tool = last_anthropic_tool(body)
    if rounds and tool:
        done = count_anthropic_tool_results(body)
        if done < rounds:
            return _json(anthropic_tool_use(model, tool, done + 1))
    if body.get("stream"):
        return await _stream(request, anthropic_stream(model), model)
    return _json(anthropic_text(model))


async def responses(request: web.Request) -> web.StreamResponse:
    body = orjson.loads(await request.read())
    model = body.get("model", "resp-bench")
    if body.get("stream"):
        return await _stream(request, responses_stream(model), model)
    return _json(responses_text(model))


async def models(_: web.Request) -> web.Response:
    listing = {
        "object": "list",
        "data": [{"id": "gpt-bench", "object": "model", "owned_by": "bench"}],
    }
    return _json(orjson.dumps(listing))


PAUSE = web.AppKey("pause", float)


def make_app(pause_s: float = 0.0) -> web.Application:
    """The stub; ``pause_s``: the pause after each chunk of a stream (``_pacing``)."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[PAUSE] = pause_s
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/chat/completions", chat_completions)
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/responses", responses)
    app.router.add_get("/v1/models", models)
    return app


def main() -> None:
    parser = host_port_args("Instant LLM upstream stub (OpenAI and Anthropic routes).")
    parser.add_argument("--pause-ms", type=float, default=0.0, help="after each stream chunk")
    args = parser.parse_args()
    serve(make_app(args.pause_ms / 1000), TrafficCounter(), args.host, args.port)


if __name__ == "__main__":
    main()
