"""Inside a mediated loop a failover repeats only the model call: a tool call that ran is
never run again (SPEC §14); the service's requests are counted."""

from __future__ import annotations

import openai
import pytest

from tests.mediation.scripted import an_calls, an_text, oa_calls, oa_text
from tests.providers.conftest import PodMaker
from tests.support.upstream import Reply

BUY = {"symbol": "AAPL", "side": "buy", "quantity": 1}
ASK = [{"role": "user", "content": "Buy one AAPL."}]


def _trades(pod) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for r in pod.service.requests if r.path == "/trades")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_failover_between_tool_rounds_runs_each_tool_once_openai(
    make_pod: PodMaker, stream: bool
) -> None:
    pod = await make_pod(mode="mediated")
    primary, secondary = pod.upstreams.primary, pod.upstreams.secondary
    primary.enqueue("openai", Reply.json(oa_calls(("t1", "desk_trade", BUY))))
    primary.enqueue("openai", Reply.error("openai", 503, "overloaded"))
    secondary.enqueue("openai", Reply.json(oa_text("Bought one AAPL.")))
    client = pod.openai()
    if stream:
        chunks = await client.chat.completions.create(model="gpt-4o", messages=ASK, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    else:
        completion = await client.chat.completions.create(model="gpt-4o", messages=ASK)
        text = completion.choices[0].message.content or ""
    assert text == "Bought one AAPL."
    assert _trades(pod) == 1
    # The fallback got the round's result, under its own model id.
    sent = secondary.requests_to("openai")[-1].json
    assert sent["model"] == "gpt-4o-east"
    assert any(m.get("role") == "tool" for m in sent["messages"])
    (record,) = await pod.audit()
    assert [(a["provider"], a["outcome"]) for a in record["providers"]] == [
        ("openai", "ok"),
        ("openai", "http_503"),
        ("azure-east", "ok"),
    ]
    assert [c["status"] for r in record["tool_trace"] for c in r["calls"]] == [200]


async def test_a_failover_between_tool_rounds_runs_each_tool_once_anthropic(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod(mode="mediated", first_byte_timeout_ms=300)
    primary, secondary = pod.upstreams.primary, pod.upstreams.secondary
    primary.enqueue("anthropic", Reply.json(an_calls(("t1", "desk_trade", BUY))))
    primary.enqueue("anthropic", Reply.hang(30.0))  # no first byte: the fallback answers
    secondary.enqueue("anthropic", Reply.json(an_text("Done.")))
    message = await pod.anthropic().messages.create(
        model="claude-haiku-4-5", max_tokens=64, messages=ASK
    )
    assert message.content[-1].text == "Done."  # type: ignore[union-attr]
    assert _trades(pod) == 1
    outcomes = [a["outcome"] for a in (await pod.audit())[0]["providers"]]
    assert outcomes == ["ok", "first_byte_timeout", "ok"]


async def test_keys_resting_in_a_mediated_loop_answer_429_with_retry_after(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod(mode="mediated", routes={})
    primary = pod.upstreams.primary
    primary.enqueue("openai", Reply.json(oa_calls(("q1", "desk_quote", {"symbol": "AAPL"}))))
    for _ in range(2):
        limited = Reply.error("openai", 429, "slow down", "rate_limit_error")
        limited.headers["retry-after"] = "20"
        primary.enqueue("openai", limited)
    with pytest.raises(openai.RateLimitError) as raised:
        await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    assert 19 <= int(raised.value.response.headers["retry-after"]) <= 20
    quotes = [r for r in pod.service.requests if r.path.startswith("/quotes/")]
    assert len(quotes) == 1
