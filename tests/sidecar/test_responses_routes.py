"""The Responses API passed through (native agents), its stored-object routes, the routes
without /v1, and unknown routes answered in the caller's protocol."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from clawpod.sidecar.manifest import Provider
from tests.sidecar.conftest import Pod, PodFactory
from tests.support import responses as r
from tests.support.sidecar import audit_records
from tests.support.upstream import RESET, Reply, anthropic_message, openai_completion

PROVIDER_KEY = "Bearer sk-test-openai-key"


async def audit(pod: Pod, count: int = 1) -> list[dict[str, Any]]:
    """The audit records, once ``count`` are written (the client may be answered first)."""
    for _ in range(500):
        records = audit_records(pod.state_dir, "agent")
        if len(records) >= count:
            return records
        await asyncio.sleep(0.01)
    raise AssertionError(f"expected {count} audit records")


async def test_create_is_passed_through(pod: Pod) -> None:
    body = r.response(r.message("Hello!"), input_tokens=12, output_tokens=4)
    pod.upstream.enqueue("responses", r.reply(body))
    answer = await pod.openai().responses.create(
        model="gpt-4o", input="hi", tools=[{"type": "web_search"}]
    )
    assert answer.output_text == "Hello!"
    (received,) = pod.upstream.requests_to("responses")
    assert received.json == {"model": "gpt-4o", "input": "hi", "tools": [{"type": "web_search"}]}
    assert received.headers["Authorization"] == PROVIDER_KEY
    (record,) = await audit(pod)
    assert record["route"] == "/v1/responses" and record["mode"] == "native"
    assert record["usage"] == {"input_tokens": 12, "output_tokens": 4, "rounds": 1}


async def test_stream_is_relayed_byte_for_byte(pod: Pod) -> None:
    body = r.response(r.message("Hello there, streaming world!"), input_tokens=7, output_tokens=5)
    pod.upstream.enqueue("responses", r.reply(body, stream=True))
    async with pod.openai().responses.stream(model="gpt-4o", input="hi") as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Hello there, streaming world!"
    (record,) = await audit(pod)
    assert record["outcome"] == {"status": "ok", "code": None}
    assert record["usage"]["input_tokens"] == 7 and record["usage"]["output_tokens"] == 5


@pytest.mark.parametrize("status", ["failed", "incomplete"])
async def test_a_stream_ending_in_failure_or_incomplete_is_complete(pod: Pod, status: str) -> None:
    body = r.response(r.message("partial"), status=status)
    pod.upstream.enqueue("responses", r.reply(body, stream=True))
    stream = await pod.openai().responses.create(model="gpt-4o", input="hi", stream=True)
    events = [event async for event in stream]
    assert events[-1].type == f"response.{status}"
    (record,) = await audit(pod)
    assert record["outcome"]["code"] is None  # not flagged as a cut stream


async def test_cut_stream_ends_with_an_error_event(pod: Pod) -> None:
    events = r.sse(r.response(r.message("never finished"))).split(b"\n\n")
    pod.upstream.enqueue("responses", Reply.sse([e + b"\n\n" for e in events[:4]] + [RESET]))
    stream = await pod.openai().responses.create(model="gpt-4o", input="hi", stream=True)
    received = [event async for event in stream]
    assert received[-1].type == "error"
    assert received[-1].code in ("upstream_protocol_error", "upstream_unreachable")


async def test_stored_response_routes_are_passed_through_and_audited(pod: Pod) -> None:
    stored = r.response(r.message("stored"), response_id="resp/../x")
    upstream = pod.upstream
    client = pod.openai()
    for made in (stored, r.response(r.message("other"), response_id="resp_1")):
        upstream.enqueue("responses", r.reply(made))  # objects this agent made: it may use them
        await client.responses.create(model="gpt-4o", input="hi")
    upstream.received.clear()
    upstream.enqueue("/v1/responses/resp/../x", Reply.json(stored))
    upstream.enqueue(
        "/v1/responses/resp_1", Reply.json({"id": "resp_1", "object": "response", "deleted": True})
    )
    items = {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
    upstream.enqueue("/v1/responses/resp_1/input_items", Reply.json(items))
    upstream.enqueue("/v1/responses/resp_1/cancel", Reply.json({**stored, "id": "resp_1"}))
    upstream.enqueue(
        "/v1/responses/input_tokens",
        Reply.json({"object": "response.input_tokens", "input_tokens": 42}),
    )
    got = await client.responses.retrieve("resp/../x")
    assert got.output_text == "stored"
    page = await client.responses.input_items.list("resp_1", limit=5, order="asc")
    assert page.data == []
    cancelled = await client.responses.cancel("resp_1")
    assert cancelled.id == "resp_1"
    await client.responses.delete("resp_1")
    counted = await client.responses.input_tokens.count(model="gpt-4o", input="hi")
    assert counted.input_tokens == 42
    methods = [(x.method, x.raw_path) for x in upstream.received]
    assert methods == [
        ("GET", "/v1/responses/resp%2F..%2Fx"),  # the id stays one path segment
        ("GET", "/v1/responses/resp_1/input_items?limit=5&order=asc"),
        ("POST", "/v1/responses/resp_1/cancel"),
        ("DELETE", "/v1/responses/resp_1"),
        ("POST", "/v1/responses/input_tokens"),
    ]
    listed = next(x for x in upstream.received if x.path.endswith("input_items"))
    assert listed.headers["Authorization"] == PROVIDER_KEY
    assert all(x.headers["Authorization"] == PROVIDER_KEY for x in upstream.received)
    records = (await audit(pod, 7))[2:]
    assert [rec["route"] for rec in records] == [
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/input_items",
        "/v1/responses/{response_id}/cancel",
        "/v1/responses/{response_id}",
        "/v1/responses/input_tokens",
    ]
    assert all(rec["provider"] == "openai" for rec in records)
    assert records[0]["usage"]["input_tokens"] == 0  # reading a response spends nothing


async def test_stored_routes_need_a_token(pod: Pod) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(pod.sidecar.url + "/v1/responses/resp_1") as response,
    ):
        assert response.status == 401
        assert "error" in await response.json()
    assert pod.upstream.received == []


async def test_a_model_in_the_body_picks_the_provider(make_pod: PodFactory, upstream) -> None:
    providers = {
        "first": Provider(
            api="openai", base_url=upstream.url + "/first", key_env="A", models=["gpt-*"]
        ),
        "second": Provider(
            api="openai", base_url=upstream.url + "/second", key_env="B", models=["o3*"]
        ),
    }
    pod = await make_pod(providers=providers)
    upstream.enqueue("/second/responses", r.reply(r.response(response_id="resp_1")))
    upstream.enqueue("/first/responses", r.reply(r.response(response_id="resp_2")))
    upstream.enqueue(
        "/second/responses/resp_1/cancel", Reply.json(r.response(response_id="resp_1"))
    )
    upstream.enqueue("/first/responses/resp_2", Reply.json(r.response(response_id="resp_2")))
    client = pod.openai()
    await client.responses.create(model="o3-mini", input="hi")
    await client.responses.create(model="gpt-4o", input="hi")
    upstream.received.clear()
    await client.responses.cancel("resp_1", extra_body={"model": "o3-mini"})
    await client.responses.retrieve("resp_2")
    assert [x.path for x in upstream.received] == [
        "/second/responses/resp_1/cancel",
        "/first/responses/resp_2",
    ]


@pytest.mark.parametrize(
    ("alias", "route", "reply"),
    [
        ("/responses", "responses", r.reply(r.response(r.message("hi")))),
        ("/chat/completions", "openai", Reply.json(openai_completion())),
    ],
)
async def test_openai_routes_without_v1(pod: Pod, alias: str, route: str, reply: Reply) -> None:
    pod.upstream.enqueue(route, reply)
    client = openai.AsyncOpenAI(base_url=pod.sidecar.url, api_key=pod.token, max_retries=0)
    pod.clients.append(client)
    if route == "responses":
        answer = await client.responses.create(model="gpt-4o", input="hi")
        assert answer.output_text == "hi"
    else:
        completion = await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
        assert completion.choices[0].message.content == "Hello!"
    (record,) = await audit(pod)
    assert record["route"] == "/v1" + alias


async def test_anthropic_routes_without_v1(pod: Pod) -> None:
    pod.upstream.enqueue("anthropic", Reply.json(anthropic_message()))
    pod.upstream.enqueue("/v1/messages/count_tokens", Reply.json({"input_tokens": 9}))
    headers = {"Authorization": f"Bearer {pod.token}", "anthropic-version": "2023-06-01"}
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(
            pod.sidecar.url + "/messages", json=body, headers=headers
        ) as response:
            assert response.status == 200
            assert (await response.json())["content"][0]["text"] == "Hello!"
        url = pod.sidecar.url + "/messages/count_tokens"
        async with session.post(url, json=body, headers=headers) as response:
            assert await response.json() == {"input_tokens": 9}
    assert [x.path for x in pod.upstream.received] == ["/v1/messages", "/v1/messages/count_tokens"]


@pytest.mark.parametrize(
    ("method", "path", "headers", "anthropic_shape"),
    [
        ("GET", "/v1/nothing-here", {}, False),
        ("POST", "/nothing", {"anthropic-version": "2023-06-01"}, True),
        ("GET", "/v1/messages", {}, True),  # a known Anthropic path, wrong method
        ("GET", "/messages/batches", {}, True),
        ("PUT", "/v1/responses/resp_1", {}, False),
    ],
)
async def test_unknown_routes_answer_in_the_callers_protocol(
    pod: Pod, method: str, path: str, headers: dict[str, str], anthropic_shape: bool
) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, pod.sidecar.url + path, headers=headers) as response,
    ):
        assert response.status in (404, 405)
        body = await response.json()
    if anthropic_shape:
        assert body["type"] == "error"
        assert body["error"]["type"] in ("not_found_error", "invalid_request_error")
    else:
        assert set(body) == {"error"} and body["error"]["message"]


async def test_anthropic_sdk_gets_its_own_shape_on_unknown_routes(pod: Pod) -> None:
    client = anthropic.AsyncAnthropic(
        base_url=pod.sidecar.url + "/nowhere", api_key=pod.token, max_retries=0
    )
    pod.clients.append(client)
    with pytest.raises(anthropic.NotFoundError) as caught:
        await client.messages.create(
            model="claude-haiku-4-5", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.body["type"] == "error"
