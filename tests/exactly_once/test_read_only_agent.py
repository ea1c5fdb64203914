"""An agent none of whose tools has side effects never meets the journal (SPEC §8.2): its calls
are safe to run again, so there is nothing to journal, resume or wait for. An agent with one
tool that has side effects keeps all of it, whatever its other tools are."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clawpod.sidecar.manifest import ToolPolicy
from tests.exactly_once.test_resume import ASK, BUY, post_openai, trades
from tests.mediation.conftest import QUOTE_SCHEMA, TRADING_TOKEN, MediatedPod, desk_tools
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.builds import AgentSpec, http_tool, providers_for, write_build
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, start_sidecar
from tests.support.upstream import Reply, StubUpstream

QUOTE = {"symbol": "AAPL"}


@pytest.fixture
async def pod(
    tmp_path: Path, upstream: StubUpstream, service: ToolService
) -> AsyncIterator[MediatedPod]:
    """``reader``: one read-only tool; ``analyst``: a read-only and a destructive tool."""
    policy = ToolPolicy(timeout_per_tool_ms=2000, total_timeout_ms=20000)
    quote = http_tool(
        "desk",
        "quote",
        service.url,
        path="/quotes/{symbol}",
        schema=QUOTE_SCHEMA,
        annotations={"readOnlyHint": True},
    )
    agents = [
        AgentSpec("reader", [quote], policy=policy),
        AgentSpec("analyst", desk_tools(service.url), policy=policy),
    ]
    root, state_dir = tmp_path / "build", tmp_path / "state"
    tokens = write_build(root, agents, providers_for(upstream.openai_url, upstream.anthropic_url))
    env = {**TEST_PROVIDER_KEYS, "TRADING_TOKEN": TRADING_TOKEN}
    sidecar = await start_sidecar(root, state_dir, env=env)
    pod = MediatedPod(sidecar, upstream, service, tokens, state_dir, root, env)
    yield pod
    await pod.close()


def last_tool_call_ids(pod: MediatedPod) -> list[str | None]:
    return [m["messages"][-1].get("tool_call_id") for m in pod.sent("openai")]


async def test_identical_requests_of_a_read_only_agent_do_not_wait_for_each_other(
    pod: MediatedPod,
) -> None:
    pod.service.reply("/quotes/AAPL", delay_s=0.3)
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("q1", "desk_quote", QUOTE))),
        Reply.json(oa_calls(("q1", "desk_quote", QUOTE))),
        Reply.json(oa_text("Up.")),
        Reply.json(oa_text("Up.")),
    )
    body = {"model": "gpt-4o", "messages": ASK}
    first, second = await asyncio.gather(
        post_openai(pod, body, agent="reader"), post_openai(pod, body, agent="reader")
    )
    assert (first[0], second[0]) == (200, 200)
    # Both asked the model before either had its quote: neither waited for the other.
    assert last_tool_call_ids(pod) == [None, None, "q1", "q1"]
    assert not (pod.state_dir / "journal").exists() or not any(
        (pod.state_dir / "journal").rglob("*.jsonl")
    )


async def test_a_read_only_agent_retried_after_a_failure_asks_everything_again(
    pod: MediatedPod,
) -> None:
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("q1", "desk_quote", QUOTE))),
        Reply.error("openai", 500, "provider trouble"),
        Reply.json(oa_calls(("q1", "desk_quote", QUOTE))),
        Reply.json(oa_text("Up.")),
    )
    body = {"model": "gpt-4o", "messages": ASK}
    assert (await post_openai(pod, body, agent="reader"))[0] == 502
    assert (await post_openai(pod, body, agent="reader"))[0] == 200
    # Nothing was journaled: the retry reads the quote again, which is harmless.
    assert len([r for r in pod.service.requests if r.path == "/quotes/AAPL"]) == 2
    records = await pod.wait_for_audit(2, agent="reader")
    assert records[1].get("resumed_from") is None


async def test_an_agent_with_one_destructive_tool_still_journals_a_read_only_round(
    pod: MediatedPod,
) -> None:
    """The read-only round is not written, but the request is the journal's: a retry after the
    trade resumes it and the trade is not sent again."""
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("q1", "desk_quote", QUOTE))),
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.error("openai", 500, "provider trouble"),
        Reply.json(oa_text("Bought.")),
    )
    body = {"model": "gpt-4o", "messages": ASK}
    assert (await post_openai(pod, body))[0] == 502
    assert (await post_openai(pod, body))[0] == 200
    assert len(trades(pod)) == 1
    records = await pod.wait_for_audit(2)
    assert records[1]["resumed_from"] == records[0]["id"]
