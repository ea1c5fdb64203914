"""#32 "Budgets bypassed": streams without usage, parallel requests, `background: true` and a
429 that SDKs retry. Each test failed before the fix; clients are the real SDKs."""

from __future__ import annotations

import asyncio
import datetime
import time

import openai
import orjson
import pytest

from clawpod.sidecar.manifest import BudgetGroup, Governance
from tests.mediation.scripted import oa_calls, oa_text
from tests.providers.conftest import PodMaker
from tests.providers.streams import chat_stream_events
from tests.support.upstream import Reply, openai_completion

ASK = [{"role": "user", "content": "hi"}]


def _budget(tokens: int) -> Governance:
    return Governance(budgets={"analyst": tokens})


async def _stream_text(client: openai.AsyncOpenAI, **kwargs: object) -> list[object]:
    chunks = await client.chat.completions.create(
        model="gpt-4o", messages=ASK, stream=True, **kwargs
    )
    return [chunk async for chunk in chunks]


async def test_a_stream_whose_client_did_not_ask_for_usage_is_charged(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={}, governance=_budget(100_000))
    pod.upstreams.primary.enqueue("openai", Reply.sse(chat_stream_events("a b c", usage=(40, 7))))
    chunks = await _stream_text(pod.openai())
    sent = pod.upstreams.primary.requests_to("openai")[-1].json
    assert sent["stream_options"] == {"include_usage": True}  # asked upstream
    assert all(c.usage is None for c in chunks)  # and not shown to a client that did not ask
    assert all(c.choices for c in chunks)
    (record,) = await pod.audit()
    assert record["usage"]["input_tokens"] == 40 and record["usage"]["output_tokens"] == 7
    assert 'claw_budget_tokens_total{agent="analyst"} 47.0' in await pod.metrics()


async def test_a_client_that_asked_for_usage_still_gets_it(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={}, governance=_budget(100_000))
    pod.upstreams.primary.enqueue("openai", Reply.sse(chat_stream_events("a b", usage=(5, 2))))
    chunks = await _stream_text(pod.openai(), stream_options={"include_usage": True})
    assert chunks[-1].usage.total_tokens == 7  # type: ignore[attr-defined]


async def test_a_stream_split_mid_event_loses_no_bytes(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})
    whole = b"".join(chat_stream_events("one two three", usage=(5, 3)))
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]  # events cut anywhere
    pod.upstreams.primary.enqueue("openai", Reply.sse(pieces))
    chunks = await _stream_text(pod.openai())
    text = "".join(c.choices[0].delta.content or "" for c in chunks)  # type: ignore[attr-defined]
    assert text == "one two three "


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_a_server_that_never_reports_usage_is_charged_an_estimate(
    make_pod: PodMaker, stream: bool
) -> None:
    """A real llama-cpp-python server audited every stream as 0/0 tokens."""
    pod = await make_pod(routes={}, governance=_budget(100_000))
    if stream:
        reply = Reply.sse(chat_stream_events("one two three four five", usage=None))
    else:
        body = openai_completion("one two three four five")
        del body["usage"]
        reply = Reply.json(body)
    pod.upstreams.primary.enqueue("openai", reply)
    client = pod.openai()
    long_prompt = [{"role": "user", "content": "x" * 4000}]
    if stream:
        chunks = await client.chat.completions.create(
            model="gpt-4o", messages=long_prompt, stream=True
        )
        _ = [chunk async for chunk in chunks]
    else:
        await client.chat.completions.create(model="gpt-4o", messages=long_prompt)
    (record,) = await pod.audit()
    usage = record["usage"]
    assert usage["estimated"] is True
    assert usage["input_tokens"] >= 1000  # 4,000 bytes of prompt
    assert usage["output_tokens"] > 0
    assert "cost_usd" in record
    metrics = await pod.metrics()
    assert 'claw_budget_tokens_total{agent="analyst"}' in metrics


async def test_parallel_requests_cannot_spend_past_the_budget(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={}, governance=_budget(1_000))
    # Every answer waits at the upstream until the test opens the gate: all ten requests are
    # in flight together, whatever the machine's load.
    gate = asyncio.Event()
    completion = orjson.dumps(openai_completion(prompt_tokens=500, completion_tokens=300))
    pod.upstreams.primary.always("openai", Reply(chunks=[gate, completion]))
    client = pod.openai()
    prompt = [{"role": "user", "content": "y" * 2000}]
    tasks = [
        asyncio.create_task(
            client.chat.completions.create(model="gpt-4o", messages=prompt, max_tokens=300)
        )
        for _ in range(10)
    ]
    for _ in range(300):  # the refused ones answer at once; give the rest 3 s to arrive
        if sum(task.done() for task in tasks) >= 9:
            break
        await asyncio.sleep(0.01)
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    records = await pod.audit(10)
    spent = sum(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in records)
    assert spent <= 1_000  # before the fix: 8,000
    refused = [r for r in results if isinstance(r, openai.RateLimitError)]
    assert len(refused) == 10 - len(pod.upstreams.primary.requests_to("openai")) == 9


async def test_background_responses_are_refused_under_a_budget(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={}, governance=_budget(100_000))
    with pytest.raises(openai.BadRequestError) as raised:
        await pod.openai().responses.create(model="gpt-4o", input="hi", background=True)
    assert raised.value.code == "background_under_budget"
    assert pod.upstreams.primary.received == []


async def test_a_spent_budget_tells_sdks_not_to_retry_before_tomorrow(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={}, governance=_budget(10))
    pod.upstreams.primary.enqueue("openai", Reply.json(openai_completion()))
    client = pod.openai(max_retries=2)  # the SDK's default
    await client.chat.completions.create(model="gpt-4o", messages=ASK)  # spends 13 of 10
    with pytest.raises(openai.RateLimitError) as raised:
        await client.chat.completions.create(model="gpt-4o", messages=ASK)
    headers = raised.value.response.headers
    assert headers["x-should-retry"] == "false"
    now = datetime.datetime.now(datetime.UTC)
    midnight = datetime.datetime.combine(
        now.date() + datetime.timedelta(days=1), datetime.time(), datetime.UTC
    )
    assert abs(int(headers["retry-after"]) - (midnight - now).total_seconds()) <= 5
    assert 'claw_budget_refusals_total{agent="analyst"} 1.0' in await pod.metrics()  # no retry


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_mediated_request_to_a_server_without_usage_is_charged_an_estimate(
    make_pod: PodMaker, stream: bool
) -> None:
    pod = await make_pod(routes={}, mode="mediated", governance=_budget(100_000))
    calls = oa_calls(("t1", "desk_quote", {"symbol": "AAPL"}))
    answer = oa_text("AAPL is at 100.")
    for reply in (calls, answer):
        del reply["usage"]
        pod.upstreams.primary.enqueue("openai", Reply.json(reply))
    client = pod.openai()
    if stream:
        chunks = await client.chat.completions.create(model="gpt-4o", messages=ASK, stream=True)
        _ = [chunk async for chunk in chunks]
    else:
        await client.chat.completions.create(model="gpt-4o", messages=ASK)
    (record,) = await pod.audit()
    assert record["usage"]["estimated"] is True
    assert record["usage"]["input_tokens"] > 0 and record["usage"]["output_tokens"] > 0
    assert record["cost_usd"] > 0


async def test_a_groups_requests_per_minute_are_refused_retryably_past_the_rate(
    make_pod: PodMaker,
) -> None:
    """#51: a budget group's rate; its agents' third request in a minute is refused with a
    429 the SDKs may retry in the next minute; an agent outside the group is not."""
    team = BudgetGroup(agents=["analyst"], requests_per_minute=2)
    pod = await make_pod(
        routes={},
        agent_ids=("analyst", "bystander"),
        governance=Governance(budget_groups={"team": team}),
    )
    pod.upstreams.primary.always("openai", Reply.json(openai_completion()))
    if time.time() % 60 > 50:  # the three requests in one minute
        await asyncio.sleep(61 - time.time() % 60)
    client = pod.openai()
    for _ in range(2):
        await client.chat.completions.create(model="gpt-4o", messages=ASK)
    with pytest.raises(openai.RateLimitError) as refused:
        await client.chat.completions.create(model="gpt-4o", messages=ASK)
    assert refused.value.code == "group_rate_exceeded"
    assert refused.value.response.headers["x-should-retry"] == "true"
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60
    await pod.openai("bystander").chat.completions.create(model="gpt-4o", messages=ASK)
