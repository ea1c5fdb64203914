"""What the audit records of passed-through requests say about usage (SPEC §7.2, §5): cached
input counted, and a client that closes once the answer is complete is no disconnect."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson

from tests.sidecar.conftest import Pod
from tests.sidecar.test_streaming import ANTHROPIC_REST, MESSAGE_START, _anthropic_event
from tests.support.upstream import Reply, anthropic_message, openai_completion

PROMPT = [{"role": "user", "content": "hi"}]


def last_record(pod: Pod) -> dict:
    return orjson.loads(pod.audit_lines()[-1])


async def test_anthropic_cached_input_is_counted(pod: Pod) -> None:
    body = anthropic_message()
    body["usage"] |= {"cache_read_input_tokens": 700, "cache_creation_input_tokens": 50}
    pod.upstream.enqueue("anthropic", Reply.json(body))
    await pod.anthropic().messages.create(model="claude-haiku-4-5", max_tokens=5, messages=PROMPT)
    assert last_record(pod)["usage"] == {
        "input_tokens": 10,
        "output_tokens": 3,
        "rounds": 1,
        "cache_read_input_tokens": 700,
        "cache_creation_input_tokens": 50,
    }


async def test_openai_cached_tokens_are_counted(pod: Pod) -> None:
    body = openai_completion(prompt_tokens=900)
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 640, "audio_tokens": 0}
    pod.upstream.enqueue("openai", Reply.json(body))
    await pod.openai().chat.completions.create(model="gpt-4o-mini", messages=PROMPT)
    usage = last_record(pod)["usage"]
    assert (usage["input_tokens"], usage["cache_read_input_tokens"]) == (900, 640)


async def test_streamed_cached_input_is_counted(pod: Pod) -> None:
    start = orjson.loads(orjson.dumps(MESSAGE_START))
    start["message"]["usage"]["cache_read_input_tokens"] = 300
    events = [_anthropic_event(start), *map(_anthropic_event, ANTHROPIC_REST)]
    pod.upstream.enqueue("anthropic", Reply.sse(events))
    stream = await pod.anthropic().messages.create(
        model="claude-haiku-4-5", max_tokens=32, messages=PROMPT, stream=True
    )
    _ = [event async for event in stream]
    assert last_record(pod)["usage"]["cache_read_input_tokens"] == 300


async def test_a_client_that_closes_after_the_end_event_got_its_answer(pod: Pod) -> None:
    gate = asyncio.Event()
    events = [_anthropic_event(MESSAGE_START), *map(_anthropic_event, ANTHROPIC_REST)]
    # The provider sends the end event, then (later) one more comment before it ends.
    pod.upstream.enqueue("anthropic", Reply.sse([*events, gate, 0.2, b": trailing\n\n"]))
    headers = {"Authorization": f"Bearer {pod.token}", "anthropic-version": "2023-06-01"}
    body = {"model": "claude-haiku-4-5", "max_tokens": 5, "messages": PROMPT, "stream": True}
    async with aiohttp.ClientSession() as session:
        response = await session.post(pod.sidecar.url + "/v1/messages", json=body, headers=headers)
        received = b""
        while b"message_stop" not in received:
            received += await response.content.readany()
        response.close()  # like an SDK that stops reading at message_stop
    gate.set()
    for _ in range(500):
        if pod.audit_lines():
            break
        await asyncio.sleep(0.01)
    record = last_record(pod)
    assert record["outcome"] == {"status": "ok", "code": None}
    assert record["usage"]["output_tokens"] == 9
