"""What a mediated request's audit record says about usage: rounds are the rounds that ran (the
withdrawn-budget round is none), and cached input is summed over the hidden calls."""

from __future__ import annotations

from clawpod.sidecar.manifest import ToolPolicy
from tests.mediation.conftest import PodFactory
from tests.mediation.scripted import an_calls, an_text
from tests.support.upstream import Reply

ASK = [{"role": "user", "content": "What is AAPL at?"}]


async def test_rounds_count_only_rounds_that_ran_tools(make_pod: PodFactory) -> None:
    # With max_rounds 1 the second model call already has tools withdrawn (contract §4.2.11):
    # the final call is a model call, not a round.
    pod = await make_pod(policy=ToolPolicy(max_rounds=1))
    pod.upstream.enqueue(
        "anthropic",
        Reply.json(an_calls(("toolu_1", "desk_quote", {"symbol": "AAPL"}))),
        Reply.json(an_text("AAPL is at 1.")),
    )
    client = pod.anthropic()
    await client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=ASK)
    assert [r.path for r in pod.service.requests] == ["/quotes/AAPL"]
    assert pod.sent("anthropic")[1]["tool_choice"] == {"type": "none"}
    (record,) = await pod.wait_for_audit(1)
    assert record["usage"]["rounds"] == 1
    assert len(record["tool_trace"]) == 1


async def test_cached_input_is_summed_over_hidden_calls(make_pod: PodFactory) -> None:
    pod = await make_pod()
    first = an_calls(("toolu_1", "desk_quote", {"symbol": "AAPL"}))
    first["usage"] |= {"cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}
    final = an_text("AAPL is at 1.")
    final["usage"] |= {"cache_read_input_tokens": 120}
    pod.upstream.enqueue("anthropic", Reply.json(first), Reply.json(final))
    client = pod.anthropic()
    await client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=ASK)
    (record,) = await pod.wait_for_audit(1)
    usage = record["usage"]
    assert (usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]) == (220, 20)
