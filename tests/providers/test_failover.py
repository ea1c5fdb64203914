"""Fallback routes (SPEC §14): the next target answers when the first fails before any byte
reached the client; driven by the real SDKs against local upstreams. (A stream that breaks
after text: test_stream_failover.py.)"""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.providers.conftest import PodMaker, closed_port_url
from tests.providers.streams import chat_stream_events, messages_stream_events
from tests.support.upstream import Reply, anthropic_message, openai_completion

ASK = [{"role": "user", "content": "hi"}]


async def _ask_openai(pod, stream: bool) -> str:  # type: ignore[no-untyped-def]
    client = pod.openai()
    if not stream:
        completion = await client.chat.completions.create(model="gpt-4o", messages=ASK)
        return completion.choices[0].message.content
    chunks = await client.chat.completions.create(model="gpt-4o", messages=ASK, stream=True)
    return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])


async def _ask_anthropic(pod, stream: bool) -> str:  # type: ignore[no-untyped-def]
    client = pod.anthropic()
    kwargs = {"model": "claude-haiku-4-5", "max_tokens": 64, "messages": ASK}
    if not stream:
        message = await client.messages.create(**kwargs)
        return message.content[0].text
    async with client.messages.stream(**kwargs) as events:
        return await events.get_final_text()


def _answer(api: str, stream: bool, text: str) -> Reply:
    if api == "openai":
        if stream:
            return Reply.sse(chat_stream_events(text))
        return Reply.json(openai_completion(text, model="gpt-4o"))
    if stream:
        return Reply.sse(messages_stream_events(text))
    return Reply.json(anthropic_message(text))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_503_is_answered_by_the_next_target(
    make_pod: PodMaker, api: str, stream: bool
) -> None:
    pod = await make_pod()
    pod.upstreams.primary.enqueue(api, Reply.error(api, 503, "overloaded"))  # type: ignore[arg-type]
    pod.upstreams.secondary.enqueue(api, _answer(api, stream, "from the fallback"))  # type: ignore[arg-type]
    ask = _ask_openai if api == "openai" else _ask_anthropic
    assert (await ask(pod, stream)).strip() == "from the fallback"
    fallback = "azure-east" if api == "openai" else "bedrock"
    (record,) = await pod.audit()
    assert record["provider"] == fallback
    assert [(a["provider"], a["outcome"]) for a in record["providers"]] == [
        ("openai" if api == "openai" else "anthropic", "http_503"),
        (fallback, "ok"),
    ]
    sent = pod.upstreams.secondary.received[-1]
    if api == "openai":  # the fallback target knows the model by its own id
        assert sent.json["model"] == "gpt-4o-east"
        assert sent.headers["Authorization"] == "Bearer sk-azure-east-key-3333"
    else:
        assert sent.headers["x-api-key"] == "sk-ant-second-key-6666"
    first = record["providers"][0]["provider"]
    counted = f'claw_provider_failovers_total{{outcome="http_503",provider="{first}"}} 1.0'
    assert counted in await pod.metrics()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_refused_connection_is_answered_by_the_next_target(
    make_pod: PodMaker, stream: bool
) -> None:
    pod = await make_pod(primary_url=closed_port_url())
    pod.upstreams.secondary.enqueue("openai", _answer("openai", stream, "still here"))
    await _ask_openai(pod, stream)  # azure-east: the record names the fallback
    # Now the fallback fails too (twice: a model call is sent once more on a fresh connection
    # when a kept-alive one closes unanswered).
    pod.upstreams.secondary.enqueue("openai", Reply.dropped(), Reply.dropped())
    with pytest.raises(openai.APIStatusError) as raised:
        await _ask_openai(pod, stream)
    assert raised.value.status_code == 502
    records = await pod.audit(2)
    assert records[-1]["provider"] == "azure-east"
    assert [a["outcome"] for a in records[-1]["providers"]] == ["unreachable", "protocol"]
    pod.upstreams.secondary.enqueue("openai", _answer("openai", stream, "still here"))
    assert (await _ask_openai(pod, stream)).strip() == "still here"
    record = (await pod.audit(3))[-1]
    assert [a["outcome"] for a in record["providers"]] == ["unreachable", "ok"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_no_first_byte_in_time_is_answered_by_the_next_target(
    make_pod: PodMaker, api: str, stream: bool
) -> None:
    pod = await make_pod(first_byte_timeout_ms=300)
    # Streamed, the head comes at once and the first event never; whole, nothing comes.
    slow = Reply.sse([30.0, *chat_stream_events("late")]) if stream else Reply.hang(30.0)
    pod.upstreams.primary.enqueue(api, slow)  # type: ignore[arg-type]
    pod.upstreams.secondary.enqueue(api, _answer(api, stream, "in time"))  # type: ignore[arg-type]
    ask = _ask_openai if api == "openai" else _ask_anthropic
    assert (await ask(pod, stream)).strip() == "in time"
    (record,) = await pod.audit()
    assert [a["outcome"] for a in record["providers"]] == ["first_byte_timeout", "ok"]


async def test_the_last_targets_failure_reaches_the_client_in_its_protocol(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod()
    pod.upstreams.primary.enqueue("anthropic", Reply.error("anthropic", 503, "down"))
    pod.upstreams.secondary.enqueue("anthropic", Reply.error("anthropic", 529, "overloaded"))
    with pytest.raises(anthropic.APIStatusError) as raised:
        await _ask_anthropic(pod, stream=False)
    assert raised.value.status_code == 529
    (record,) = await pod.audit()
    assert [a["outcome"] for a in record["providers"]] == ["http_503", "http_529"]


async def test_a_model_outside_every_route_goes_to_its_provider_alone(make_pod: PodMaker) -> None:
    pod = await make_pod()
    pod.upstreams.primary.enqueue("openai", Reply.error("openai", 503, "down"))
    with pytest.raises(openai.InternalServerError):
        await pod.openai().chat.completions.create(model="gpt-5", messages=ASK)
    assert pod.upstreams.secondary.received == []


@pytest.mark.parametrize("status", [500, 503])
async def test_a_responses_request_fails_over_too(make_pod: PodMaker, status: int) -> None:
    pod = await make_pod()
    pod.upstreams.primary.enqueue("responses", Reply.error("openai", status, "down"))
    answer = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "gpt-4o-east",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "hello", "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6},
    }
    pod.upstreams.secondary.enqueue("responses", Reply.json(answer))
    response = await pod.openai().responses.create(model="gpt-4o", input="hi")
    assert response.output_text == "hello"
    assert pod.upstreams.secondary.requests_to("responses")[-1].json["model"] == "gpt-4o-east"
    (record,) = await pod.audit()
    assert [a["outcome"] for a in record["providers"]] == [f"http_{status}", "ok"]
