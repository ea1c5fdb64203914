"""Streaming pass-through: chunks are forwarded as they arrive, failures end the stream with
the protocol's in-band error, and a client that leaves is still audited."""

from __future__ import annotations

import asyncio

import aiohttp
import anthropic
import openai
import orjson
import pytest

from tests.sidecar.conftest import Pod, PodFactory
from tests.support.upstream import RESET, Reply

# A guard against hanging forever if the sidecar buffered; not a timing assertion.
DEADLOCK_GUARD_S = 10
PROMPT = [{"role": "user", "content": "hi"}]


def _openai_chunk(n: int, text: str) -> bytes:
    chunk = {
        "id": f"chunk-{n}",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _anthropic_event(event: dict) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


MESSAGE_START = {
    "type": "message_start",
    "message": {
        "id": "msg_gate",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 21, "output_tokens": 1},
    },
}
ANTHROPIC_REST = [
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "content_block_stop", "index": 0},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 9},
    },
    {"type": "message_stop"},
]


async def test_openai_first_chunk_arrives_before_upstream_sends_the_rest(pod: Pod) -> None:
    gate = asyncio.Event()
    pod.upstream.enqueue(
        "openai",
        Reply.sse([_openai_chunk(1, "Hel"), gate, _openai_chunk(2, "lo"), b"data: [DONE]\n\n"]),
    )
    stream = await pod.openai().chat.completions.create(
        model="gpt-4o-mini", messages=PROMPT, stream=True
    )
    chunks = stream.__aiter__()
    first = await asyncio.wait_for(chunks.__anext__(), DEADLOCK_GUARD_S)
    assert first.choices[0].delta.content == "Hel"
    assert not gate.is_set()  # the upstream is still holding the rest back
    gate.set()
    rest = [chunk.choices[0].delta.content async for chunk in chunks]
    assert rest == ["lo"]


async def test_anthropic_first_event_arrives_before_upstream_sends_the_rest(pod: Pod) -> None:
    gate = asyncio.Event()
    events = [_anthropic_event(MESSAGE_START), gate, *map(_anthropic_event, ANTHROPIC_REST)]
    pod.upstream.enqueue("anthropic", Reply.sse(events))
    stream = await pod.anthropic().messages.create(
        model="claude-haiku-4-5", max_tokens=32, messages=PROMPT, stream=True
    )
    received = stream.__aiter__()
    first = await asyncio.wait_for(received.__anext__(), DEADLOCK_GUARD_S)
    assert first.type == "message_start"
    assert not gate.is_set()
    gate.set()
    assert [event.type async for event in received] == [e["type"] for e in ANTHROPIC_REST]
    record = orjson.loads(pod.audit_lines()[-1])
    assert record["usage"] == {"input_tokens": 21, "output_tokens": 9, "rounds": 1}
    assert record["stream"] is True


async def test_upstream_reset_mid_stream_ends_with_openai_stream_error(pod: Pod) -> None:
    pod.upstream.enqueue("openai", Reply.sse([_openai_chunk(1, "Hel"), RESET]))
    stream = await pod.openai().chat.completions.create(
        model="gpt-4o-mini", messages=PROMPT, stream=True
    )
    received = []
    with pytest.raises(openai.APIError, match="broke the connection"):
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content)
    assert received == ["Hel"]
    record = orjson.loads(pod.audit_lines()[-1])
    assert record["outcome"] == {"status": "error", "code": "upstream_protocol_error"}


async def test_upstream_reset_mid_stream_ends_with_anthropic_error_event(pod: Pod) -> None:
    pod.upstream.enqueue("anthropic", Reply.sse([_anthropic_event(MESSAGE_START), RESET]))
    raw = b""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            pod.sidecar.url + "/v1/messages",
            json={"model": "claude-haiku-4-5", "max_tokens": 9, "messages": PROMPT, "stream": True},
            headers={"x-api-key": pod.token},
        ) as response,
    ):
        raw = await response.read()
    assert raw.startswith(b"event: message_start\n")
    assert raw.endswith(b"\n\n")
    last_event = raw.strip().split(b"\n\n")[-1]
    assert last_event.startswith(b"event: error\ndata: ")
    assert orjson.loads(last_event.split(b"data: ", 1)[1])["error"]["type"] == "api_error"


async def test_anthropic_sdk_raises_on_mid_stream_error(pod: Pod) -> None:
    pod.upstream.enqueue("anthropic", Reply.sse([_anthropic_event(MESSAGE_START), RESET]))
    stream = await pod.anthropic().messages.create(
        model="claude-haiku-4-5", max_tokens=9, messages=PROMPT, stream=True
    )
    with pytest.raises(anthropic.APIStatusError, match="broke the connection"):
        async for _ in stream:
            pass


async def test_stream_read_timeout_becomes_stream_error(make_pod: PodFactory) -> None:
    pod = await make_pod(upstream_timeout_ms=200)
    pod.upstream.enqueue("openai", Reply.sse([_openai_chunk(1, "Hel"), 30.0, _openai_chunk(2, "")]))
    stream = await pod.openai().chat.completions.create(
        model="gpt-4o-mini", messages=PROMPT, stream=True
    )
    with pytest.raises(openai.APIError, match="did not answer in time"):
        async for _ in stream:
            pass
    record = orjson.loads(pod.audit_lines()[-1])
    assert record["outcome"]["code"] == "upstream_timeout"


async def test_client_leaving_mid_stream_is_audited(pod: Pod) -> None:
    gate = asyncio.Event()
    pod.upstream.enqueue(
        "openai",
        Reply.sse(
            [_openai_chunk(1, "a"), gate, *[_openai_chunk(n, "b" * 4096) for n in range(64)]]
        ),
    )
    body = {"model": "gpt-4o-mini", "messages": PROMPT, "stream": True}
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            pod.sidecar.url + "/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {pod.token}"},
        )
        assert (await response.content.readany()).startswith(b"data: ")
        response.close()  # drop the connection mid-stream
    gate.set()
    for _ in range(DEADLOCK_GUARD_S * 20):
        if pod.audit_lines():
            break
        await asyncio.sleep(0.05)
    record = orjson.loads(pod.audit_lines()[-1])
    assert record["outcome"] == {"status": "error", "code": "client_disconnected"}
