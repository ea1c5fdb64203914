"""Prices (SPEC §14): cost in USD in the audit record, in `clawc audit show` and in the metrics,
from the price table and the usage the upstreams reported; USD budgets stop an agent."""

from __future__ import annotations

import io

import openai
import pytest

from clawpod.cli.audit import describe, show_command
from clawpod.sidecar.manifest import Governance
from clawpod.sidecar.model.usage import BUILT_IN_PRICES, price_of
from tests.mediation.scripted import oa_calls, oa_text
from tests.providers.conftest import PodMaker
from tests.providers.streams import messages_stream_events
from tests.support.upstream import Reply, openai_completion

ASK = [{"role": "user", "content": "hi"}]
BUY = {"symbol": "AAPL", "side": "buy", "quantity": 1}


def _cost(price_input: float, price_output: float, tokens_in: int, tokens_out: int) -> float:
    return (tokens_in * price_input + tokens_out * price_output) / 1_000_000


async def test_a_passed_through_calls_cost_is_the_tables_price_of_its_usage(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod(routes={})
    usage = {"prompt_tokens": 1200, "completion_tokens": 300}
    pod.upstreams.primary.enqueue("openai", Reply.json(openai_completion(**usage)))
    await pod.openai().chat.completions.create(model="gpt-4o-mini", messages=ASK)
    (record,) = await pod.audit()
    mini = BUILT_IN_PRICES["gpt-4o-mini*"]
    assert record["cost_usd"] == pytest.approx(_cost(mini.input, mini.output, 1200, 300))
    shown = io.StringIO()
    show_command(pod.state_dir, shown)
    assert f"cost=${record['cost_usd']:.6f}" in shown.getvalue()
    assert 'claw_cost_usd_total{agent="analyst",provider="openai"}' in await pod.metrics()


async def test_cached_input_is_priced_as_cached(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})
    body = openai_completion(model="gpt-4o")
    body["usage"] = {
        "prompt_tokens": 1000,
        "completion_tokens": 100,
        "total_tokens": 1100,
        "prompt_tokens_details": {"cached_tokens": 800},
    }
    pod.upstreams.primary.enqueue("openai", Reply.json(body))
    await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    (record,) = await pod.audit()
    price = BUILT_IN_PRICES["gpt-4o*"]
    expected = (200 * price.input + 800 * price.cached_input + 100 * price.output) / 1e6
    assert record["cost_usd"] == pytest.approx(expected)


async def test_anthropic_stream_cost_counts_cache_reads_and_writes(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})
    events = messages_stream_events("hi", usage=(100, 50))
    # message_start with cache reads and writes beside the fresh input (Anthropic's shape).
    events[0] = events[0].replace(
        b'"input_tokens":100',
        b'"input_tokens":100,"cache_read_input_tokens":1000,"cache_creation_input_tokens":400',
    )
    pod.upstreams.primary.enqueue("anthropic", Reply.sse(events))
    async with pod.anthropic().messages.stream(
        model="claude-haiku-4-5", max_tokens=64, messages=ASK
    ) as stream:
        await stream.get_final_text()
    (record,) = await pod.audit()
    price = price_of("claude-haiku-4-5", {})
    assert price is not None and price.cache_write is not None
    expected = (
        100 * price.input + 1000 * price.cached_input + 400 * price.cache_write + 50 * price.output
    ) / 1e6
    assert record["cost_usd"] == pytest.approx(expected)


async def test_the_pod_files_price_replaces_the_built_in_one(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})  # openai prices gpt-4o-special at 1.0 / 2.0
    pod.upstreams.primary.enqueue(
        "openai", Reply.json(openai_completion(prompt_tokens=1000, completion_tokens=1000))
    )
    await pod.openai().chat.completions.create(model="gpt-4o-special", messages=ASK)
    (record,) = await pod.audit()
    assert record["cost_usd"] == pytest.approx(_cost(1.0, 2.0, 1000, 1000))


async def test_a_model_without_a_price_has_no_cost(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})
    pod.upstreams.primary.enqueue("openai", Reply.json(openai_completion()))
    await pod.openai().chat.completions.create(model="gpt-unknown-model", messages=ASK)
    (record,) = await pod.audit()
    assert "cost_usd" not in record


async def test_a_mediated_request_costs_each_call_at_the_price_of_who_answered_it(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod(mode="mediated")
    calls = oa_calls(("t1", "desk_trade", BUY))
    calls["usage"] = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
    pod.upstreams.primary.enqueue("openai", Reply.json(calls))
    pod.upstreams.primary.enqueue("openai", Reply.error("openai", 500, "down"))
    answer = oa_text("Bought.")
    answer["usage"] = {"prompt_tokens": 2000, "completion_tokens": 50, "total_tokens": 2050}
    pod.upstreams.secondary.enqueue("openai", Reply.json(answer))
    await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    (record,) = await pod.audit()
    first = price_of("gpt-4o", {})
    second = price_of("gpt-4o-east", {})  # the fallback's own id: the gpt-4o* price
    assert first is not None and second is not None
    expected = _cost(first.input, first.output, 1000, 100) + _cost(
        second.input, second.output, 2000, 50
    )
    assert record["cost_usd"] == pytest.approx(expected)


async def test_a_usd_budget_stops_the_agent_once_spent(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={}, governance=Governance(usd_budgets={"analyst": 0.01}))
    # 1,000 input + 500 output tokens of gpt-4o: $0.0075 a request.
    for _ in range(3):
        pod.upstreams.primary.enqueue(
            "openai", Reply.json(openai_completion(prompt_tokens=1000, completion_tokens=500))
        )
    client = pod.openai()
    await client.chat.completions.create(model="gpt-4o", messages=ASK)
    await client.chat.completions.create(model="gpt-4o", messages=ASK)  # 0.0075 < 0.01
    with pytest.raises(openai.RateLimitError) as raised:
        await client.chat.completions.create(model="gpt-4o", messages=ASK)
    assert raised.value.code == "budget_exhausted"
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert len(pod.upstreams.primary.requests_to("openai")) == 2
    assert 'claw_budget_usd_total{agent="analyst"} 0.015' in await pod.metrics()


async def test_a_budget_refusal_names_no_provider_it_never_called(make_pod: PodMaker) -> None:
    """The refused request reached no model: its record (and so `clawc audit show` and the
    console) must not say openai/gpt-4o answered it, nor show it spending tokens."""
    pod = await make_pod(routes={}, governance=Governance(usd_budgets={"analyst": 0.001}))
    pod.upstreams.primary.enqueue(
        "openai", Reply.json(openai_completion(prompt_tokens=1000, completion_tokens=500))
    )
    client = pod.openai()
    await client.chat.completions.create(model="gpt-4o", messages=ASK)  # spends it all
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="gpt-4o", messages=ASK)
    answered, refused = await pod.audit()
    assert answered["provider"] == "openai"
    assert refused["outcome"]["code"] == "budget_exhausted"
    assert refused["provider"] is None
    assert refused["model"] == "gpt-4o"  # what the agent asked for
    assert "cost_usd" not in refused
    shown = describe(refused)
    assert "openai/" not in shown and "tokens=" not in shown
