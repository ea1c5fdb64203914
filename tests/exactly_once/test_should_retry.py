"""`x-should-retry: false` (SPEC §7.2): the official SDKs, at their DEFAULT retries, never send
again a request whose failure the sidecar decided or after which a destructive tool ran."""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from clawpod.sidecar.manifest import ToolPolicy
from tests.mediation.conftest import MediatedPod, PodFactory
from tests.mediation.scripted import an_calls, oa_calls
from tests.support.upstream import Reply

ASK = [{"role": "user", "content": "Buy one AAPL."}]
BUY = {"symbol": "AAPL", "side": "buy", "quantity": 1}
QUOTE = ("q1", "desk_quote", {"symbol": "AAPL"})
LOCAL = {"type": "function", "function": {"name": "local_fn", "parameters": {"type": "object"}}}


def default_openai(pod: MediatedPod) -> openai.AsyncOpenAI:
    """The SDK as users run it: default max_retries (2)."""
    client = openai.AsyncOpenAI(base_url=pod.sidecar.openai_base_url, api_key=pod.tokens["analyst"])
    pod.clients.append(client)
    return client


def default_anthropic(pod: MediatedPod) -> anthropic.AsyncAnthropic:
    client = anthropic.AsyncAnthropic(
        base_url=pod.sidecar.anthropic_base_url, api_key=pod.tokens["analyst"]
    )
    pod.clients.append(client)
    return client


def trades(pod: MediatedPod) -> int:
    return sum(1 for r in pod.service.requests if r.path == "/trades")


def repeat(pod: MediatedPod, api: str, *replies: Reply, times: int = 3) -> None:
    """The same script once per attempt the SDK could make."""
    for _ in range(times):
        pod.upstream.enqueue(api, *replies)


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_openai_sdk_does_not_retry_after_a_destructive_tool_ran(
    pod: MediatedPod, status: int
) -> None:
    repeat(
        pod,
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.error("openai", status, "provider trouble"),
    )
    with pytest.raises(openai.APIStatusError) as caught:
        await default_openai(pod).chat.completions.create(model="gpt-4o", messages=ASK)
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert trades(pod) == 1
    assert len(pod.sent("openai")) == 2  # one attempt, not three


async def test_anthropic_sdk_does_not_retry_after_a_destructive_tool_ran(pod: MediatedPod) -> None:
    repeat(
        pod,
        "anthropic",
        Reply.json(an_calls(("t1", "desk_trade", BUY))),
        Reply.error("anthropic", 529, "overloaded", "overloaded_error"),
    )
    with pytest.raises(anthropic.APIStatusError) as caught:
        await default_anthropic(pod).messages.create(
            model="claude-haiku-4-5", max_tokens=64, messages=ASK
        )
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert trades(pod) == 1
    assert len(pod.sent("anthropic")) == 2


async def test_a_read_only_round_keeps_the_failure_retryable(pod: MediatedPod) -> None:
    """Only side effects make a provider failure final; a quote can be fetched again."""
    pod.upstream.enqueue(
        "openai", Reply.json(oa_calls(QUOTE)), Reply.error("openai", 500, "provider trouble")
    )
    client = pod.openai()  # no retries: one attempt, look at its headers
    with pytest.raises(openai.APIStatusError) as caught:
        await client.chat.completions.create(model="gpt-4o", messages=ASK)
    assert "x-should-retry" not in caught.value.response.headers


async def test_mixed_executors_are_final(pod: MediatedPod) -> None:
    mixed = oa_calls(QUOTE, ("l1", "local_fn", {}))
    repeat(pod, "openai", Reply.json(mixed))
    with pytest.raises(openai.APIStatusError) as caught:
        await default_openai(pod).chat.completions.create(
            model="gpt-4o", messages=ASK, tools=[LOCAL]
        )
    assert caught.value.body["code"] == "mixed_executor_response"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert len(pod.sent("openai")) == 1


async def test_budget_exhausted_is_final(make_pod: PodFactory) -> None:
    pod = await make_pod(policy=ToolPolicy(max_rounds=1))
    repeat(pod, "openai", Reply.json(oa_calls(QUOTE)), Reply.json(oa_calls(QUOTE)))
    with pytest.raises(openai.APIStatusError) as caught:
        await default_openai(pod).chat.completions.create(model="gpt-4o", messages=ASK)
    assert caught.value.body["code"] == "tool_budget_exhausted"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert len(pod.sent("openai")) == 2


@pytest.mark.parametrize(
    "body",
    [
        {"model": "gpt-4o", "messages": "not a list"},
        {"model": "no-such-model", "messages": ASK},
    ],
)
async def test_validation_errors_are_final(pod: MediatedPod, body: dict[str, Any]) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            pod.sidecar.openai_base_url + "/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {pod.tokens['analyst']}"},
        ) as response,
    ):
        assert response.status == 400
        assert response.headers["x-should-retry"] == "false"
