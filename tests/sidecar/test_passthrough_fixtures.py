"""Every recorded exchange in the shared fixtures, replayed through the sidecar's pass-through:
byte-exact for a raw client, and parsed correctly by the real OpenAI and Anthropic SDKs."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest

from tests.sidecar.conftest import Pod
from tests.support.upstream import Recorded, fixture_files, load_fixture

EXCHANGES = [exchange for name in fixture_files() for exchange in load_fixture(name)]
IDS = [f"{e.source}#{e.turn}" for e in EXCHANGES]
DEFAULT_MODEL = {"openai": "gpt-4o-mini", "anthropic": "claude-haiku-4-5"}
OPENAI_ERRORS = {400: openai.BadRequestError, 404: openai.NotFoundError}
ANTHROPIC_ERRORS = {400: anthropic.BadRequestError, 404: anthropic.NotFoundError}
PROMPT = [{"role": "user", "content": "hi"}]


def test_every_fixture_file_is_replayed() -> None:
    assert {e.source for e in EXCHANGES} == set(fixture_files())
    assert len(EXCHANGES) >= 40


def _model(exchange: Recorded) -> str:
    recorded = (exchange.request or {}).get("model")
    return recorded if isinstance(recorded, str) else DEFAULT_MODEL[exchange.api]


def _request_body(exchange: Recorded) -> dict[str, Any]:
    if exchange.request is not None:
        body = dict(exchange.request)
    else:
        body = {"model": _model(exchange), "messages": PROMPT}
        if exchange.api == "anthropic":
            body["max_tokens"] = 256
    body["stream"] = exchange.stream
    if exchange.api == "openai" and exchange.stream:
        # A client that asks for usage gets the stream as it came; one that does not is asked
        # for it anyway and has the usage chunk taken out (tests/sidecar/test_stream_usage.py).
        body["stream_options"] = {**body.get("stream_options", {}), "include_usage": True}
    return body


def _sse_data_events(body: bytes) -> list[Any]:
    lines = [line[5:].strip() for line in body.split(b"\n") if line.startswith(b"data:")]
    return [orjson.loads(line) for line in lines if line != b"[DONE]"]


@pytest.mark.parametrize("exchange", EXCHANGES, ids=IDS)
async def test_raw_replay_is_byte_exact(pod: Pod, exchange: Recorded) -> None:
    pod.upstream.enqueue(exchange.api, exchange.reply())
    sent = orjson.dumps(_request_body(exchange))
    route = "/v1/chat/completions" if exchange.api == "openai" else "/v1/messages"
    headers = {"Authorization": f"Bearer {pod.token}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(pod.sidecar.url + route, data=sent, headers=headers) as response,
    ):
        received = await response.read()
        assert response.status == exchange.status
        assert response.content_type == exchange.content_type.split(";")[0]
    assert received == exchange.body
    assert pod.upstream.received[-1].body == sent  # forwarded unchanged, not re-serialised


@pytest.mark.parametrize("exchange", EXCHANGES, ids=IDS)
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_sdk_parses_replay(pod: Pod, exchange: Recorded, sync: bool) -> None:
    pod.upstream.enqueue(exchange.api, exchange.reply())
    if exchange.api == "openai":
        await _check_openai(pod, exchange, sync)
    else:
        await _check_anthropic(pod, exchange, sync)
    assert pod.upstream.received[-1].json["model"] == _model(exchange)


async def _call(sync: bool, function: Any, **kwargs: Any) -> Any:
    """Run an SDK call; sync clients block, so they run in a thread beside the servers' loop."""
    if sync:
        return await asyncio.to_thread(function, **kwargs)
    return await function(**kwargs)


async def _check_openai(pod: Pod, exchange: Recorded, sync: bool) -> None:
    create = pod.openai(sync=sync).chat.completions.create
    kwargs = {"model": _model(exchange), "messages": PROMPT}
    if exchange.status >= 400:
        with pytest.raises(OPENAI_ERRORS[exchange.status]) as raised:
            await _call(sync, create, **kwargs)
        assert exchange.json["error"]["message"] in str(raised.value)
        return
    if not exchange.stream:
        completion = await _call(sync, create, **kwargs)
        assert completion.id == exchange.json["id"]
        assert len(completion.choices) == len(exchange.json["choices"])
        return
    if sync:
        chunks = await asyncio.to_thread(lambda: list(create(**kwargs, stream=True)))
    else:
        chunks = [chunk async for chunk in await create(**kwargs, stream=True)]
    # The SDK did not ask for usage: the usage-only chunk the sidecar asked for is not shown.
    shown = [e for e in _sse_data_events(exchange.body) if not _usage_only(e)]
    assert [c.id for c in chunks] == [e["id"] for e in shown]


def _usage_only(event: Any) -> bool:
    return event.get("choices") == [] and "usage" in event


async def _check_anthropic(pod: Pod, exchange: Recorded, sync: bool) -> None:
    client = pod.anthropic(sync=sync)
    kwargs = {"model": _model(exchange), "max_tokens": 256, "messages": PROMPT}
    if exchange.status >= 400:
        with pytest.raises(ANTHROPIC_ERRORS[exchange.status]) as raised:
            await _call(sync, client.messages.create, **kwargs)
        assert exchange.json["error"]["message"] in str(raised.value)
        return
    if not exchange.stream:
        message = await _call(sync, client.messages.create, **kwargs)
        assert message.id == exchange.json["id"]
        assert [b.type for b in message.content] == [b["type"] for b in exchange.json["content"]]
        return
    events = _sse_data_events(exchange.body)
    if sync:  # the SDK's accumulating stream helper
        final = await asyncio.to_thread(_final_message, client, kwargs)
        blocks = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
        assert final.id == events[0]["message"]["id"]
        assert [b.type for b in final.content] == blocks
    else:  # raw events; the SDK drops pings
        stream = await client.messages.create(**kwargs, stream=True)
        received = [event.type async for event in stream]
        assert received == [e["type"] for e in events if e["type"] != "ping"]


def _final_message(client: anthropic.Anthropic, kwargs: dict[str, Any]) -> Any:
    with client.messages.stream(**kwargs) as stream:
        return stream.get_final_message()
