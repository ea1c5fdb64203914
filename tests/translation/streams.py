"""Streamed answers of each provider protocol, written from the providers' documented event
order (not by the sidecar's codecs), in one SSE event per piece so a test can hold the rest
of a stream back; and the real SDKs streaming as callers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.support import responses as rs
from tests.support.upstream import RESET, Reply
from tests.translation.conftest import TranslatingPod

Call = tuple[str, str, dict[str, Any]]  # id, name, arguments


def _data(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\n" + _data({"type": kind, **payload})


def chat_events(texts: list[str], calls: list[Call], tokens: int) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        head = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1}
        return _data({**head, "model": "local-model", "choices": [choice]})

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": text}) for text in texts]
    for index, (call_id, name, arguments) in enumerate(calls):
        function = {"name": name, "arguments": ""}
        start = {"index": index, "id": call_id, "type": "function", "function": function}
        events.append(chunk({"tool_calls": [start]}))
        text = orjson.dumps(arguments).decode()
        for at in range(0, len(text), 4):
            piece = {"index": index, "function": {"arguments": text[at : at + 4]}}
            events.append(chunk({"tool_calls": [piece]}))
    events.append(chunk({}, "tool_calls" if calls else "stop"))
    usage = {"prompt_tokens": tokens, "completion_tokens": 3, "total_tokens": tokens + 3}
    events.append(_data({"id": "chatcmpl-up", "choices": [], "usage": usage}))
    return [*events, b"data: [DONE]\n\n"]


def messages_events(texts: list[str], calls: list[Call], tokens: int) -> list[bytes]:
    message = {"id": "msg_up", "type": "message", "role": "assistant", "model": "claude"}
    message |= {"content": [], "stop_reason": None, "usage": {"input_tokens": tokens}}
    events = [_event("message_start", {"message": message})]
    index = 0
    if texts:
        block = {"type": "text", "text": ""}
        events.append(_event("content_block_start", {"index": 0, "content_block": block}))
        for text in texts:
            delta = {"type": "text_delta", "text": text}
            events.append(_event("content_block_delta", {"index": 0, "delta": delta}))
        events.append(_event("content_block_stop", {"index": 0}))
        index = 1
    for offset, (call_id, name, arguments) in enumerate(calls):
        at = index + offset
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        events.append(_event("content_block_start", {"index": at, "content_block": block}))
        text = orjson.dumps(arguments).decode()
        for start in range(0, len(text), 4):
            delta = {"type": "input_json_delta", "partial_json": text[start : start + 4]}
            events.append(_event("content_block_delta", {"index": at, "delta": delta}))
        events.append(_event("content_block_stop", {"index": at}))
    stop = {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None}
    events.append(_event("message_delta", {"delta": stop, "usage": {"output_tokens": 3}}))
    return [*events, _event("message_stop", {})]


def responses_events(texts: list[str], calls: list[Call], tokens: int) -> list[bytes]:
    output = [rs.message("".join(texts), "msg_up")] if texts else []
    output += [rs.call(call_id, name, arguments) for call_id, name, arguments in calls]
    body = rs.response(*output, response_id="resp_up", input_tokens=tokens)
    events = []
    for kind, payload in rs.sse_events(body):
        if kind == "response.output_text.delta":
            continue  # re-cut below: one delta per piece of text, as given
        events.append(b"event: " + kind.encode() + b"\n" + _data(payload))
        if kind == "response.content_part.added":
            at = {k: payload[k] for k in ("item_id", "output_index", "content_index")}
            events += [
                _event("response.output_text.delta", {**at, "delta": t, "logprobs": []})
                for t in texts
            ]
    return events


EVENTS: dict[str, Callable[[list[str], list[Call], int], list[bytes]]] = {
    "chat": chat_events,
    "messages": messages_events,
    "responses": responses_events,
}


def stream_reply(
    protocol: str,
    texts: list[str] = (),  # type: ignore[assignment]
    calls: list[Call] = (),  # type: ignore[assignment]
    *,
    tokens: int = 40,
    hold_after_first_text: asyncio.Event | None = None,
    cut_after_first_text: bool = False,
) -> Reply:
    """A streamed answer; the rest after the first text waits for ``hold_after_first_text``
    (a caller can only set it once that text reached it live), or the connection drops there
    (``cut_after_first_text``)."""
    events: list[Any] = list(EVENTS[protocol](list(texts), list(calls), tokens))
    if hold_after_first_text is not None or cut_after_first_text:
        first = next(i for i, e in enumerate(events) if texts[0].encode() in e)
        rest = [RESET] if cut_after_first_text else [hold_after_first_text, *events[first + 1 :]]
        events = [*events[: first + 1], *rest]
    return Reply.sse(events)


@dataclass
class Streamed:
    """What a caller's SDK made of a stream."""

    deltas: list[str] = field(default_factory=list)
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    stop: str | None = None
    input_tokens: int | None = None
    error: Exception | None = None


async def stream_through(
    pod: TranslatingPod,
    caller: str,
    agent: str,
    model: str,
    on_text: Callable[[], None] = lambda: None,
    *,
    chat_usage: bool = True,
    **extra: Any,
) -> Streamed:
    """One streamed request through the caller's real SDK; ``on_text`` runs at each text
    delta as it arrives; ``chat_usage``: a Chat Completions caller asks for its usage chunk.
    An error the SDK raises is kept in the result."""
    got = Streamed()
    prompt = [{"role": "user", "content": "What is AAPL at?"}]
    usage = {"include_usage": True}
    try:
        if caller == "messages":
            async with (
                pod.anthropic(agent) as claude,
                claude.messages.stream(
                    model=model, max_tokens=256, messages=prompt, **extra
                ) as live,
            ):
                async for event in live:
                    if event.type == "text":
                        got.deltas.append(event.text)
                        on_text()
                message = await live.get_final_message()
            got.text = "".join(b.text for b in message.content if b.type == "text")
            got.calls = [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"]
            got.stop, got.input_tokens = message.stop_reason, message.usage.input_tokens
        elif caller == "chat":
            async with (
                pod.openai(agent) as client,
                client.chat.completions.stream(
                    model=model,
                    messages=prompt,
                    **({"stream_options": usage} if chat_usage else {}),
                    **extra,
                ) as live,
            ):
                async for event in live:
                    if event.type == "content.delta" and event.delta:
                        got.deltas.append(event.delta)
                        on_text()
                final = live.current_completion_snapshot
            choice = final.choices[0]
            got.text = choice.message.content or ""
            got.calls = [
                (c.id, c.function.name, orjson.loads(c.function.arguments))
                for c in choice.message.tool_calls or []
            ]
            got.stop = choice.finish_reason
            got.input_tokens = final.usage.prompt_tokens if final.usage else None
        else:
            async with (
                pod.openai(agent) as client,
                client.responses.stream(model=model, input="What is AAPL at?", **extra) as live,
            ):
                async for event in live:
                    if event.type == "response.output_text.delta":
                        got.deltas.append(event.delta)
                        on_text()
                    elif event.type == "response.failed":
                        raise RuntimeError(f"response.failed: {event.response.error}")
                final = await live.get_final_response()
            got.text = final.output_text
            got.calls = [
                (i.call_id, i.name, orjson.loads(i.arguments))
                for i in final.output
                if i.type == "function_call"
            ]
            got.stop = final.status
            got.input_tokens = final.usage.input_tokens if final.usage else None
    except Exception as exc:  # the SDK's own error: what the caller sees
        got.error = exc
    return got
