"""What a request can need is decided once (``routing.RoutePlan``, ``SidecarState.budgeted``):
a plain route, an agent without a budget and tracing off skip the failover walk, the budget
gate and the span helpers; where they are configured, each still applies."""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clawpod.sidecar.manifest import Governance, Mode, Provider
from clawpod.sidecar.observability import tracing
from clawpod.sidecar.server.providers.upstream import plan_route
from tests.sidecar.conftest import Pod, PodFactory
from tests.support.builds import AgentSpec, http_tool
from tests.support.sidecar import audit_records_when
from tests.support.upstream import Reply, StubUpstream, openai_completion

PROMPT = [{"role": "user", "content": "hi"}]
URL = "http://127.0.0.1:9"
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = {"traceparent": f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"}


async def _audit(pod: Pod, agent: str, count: int) -> list[dict[str, Any]]:
    return await audit_records_when(pod.state_dir, agent, count)


def _provider(**settings: object) -> Provider:
    return Provider(
        **{"api": "openai", "base_url": URL, "key_env": "K", "models": ["*"], **settings}
    )  # type: ignore[arg-type]


def test_one_provider_with_one_key_in_the_callers_protocol_is_plain() -> None:
    plan = plan_route("chat", [("p", _provider(), "gpt-4o")])
    assert (plan.walks, plan.crosses) == (False, False)


@pytest.mark.parametrize(
    "targets",
    [
        [("p", _provider(key_env=["K1", "K2"]), "gpt-4o")],
        [("p", _provider(first_byte_timeout_ms=500), "gpt-4o")],
        [("p", _provider(), "gpt-4o"), ("q", _provider(), "gpt-4o-mini")],
    ],
    ids=["key pool", "first-byte bound", "fallback route"],
)
def test_a_key_pool_a_first_byte_bound_or_a_fallback_needs_the_walk(
    targets: list[tuple[str, Provider, str]],
) -> None:
    assert plan_route("chat", targets).walks


def test_a_target_of_another_protocol_is_translated() -> None:
    chat_only = _provider(protocols=["chat"])
    assert plan_route("messages", [("p", chat_only, "m")]).crosses
    assert plan_route("responses", [("p", chat_only, "m")]).crosses
    assert not plan_route("chat", [("p", chat_only, "m")]).crosses
    messages = Provider(api="anthropic", base_url=URL, key_env="K", models=["*"])
    assert plan_route("chat", [("p", _provider(), "m"), ("q", messages, "m")]).crosses


async def test_an_agent_without_a_budget_beside_one_with_a_budget(
    make_pod: PodFactory, upstream: StubUpstream
) -> None:
    """The budgeted agent is still held to its budget; the other is never refused, and both
    requests are audited."""
    pod = await make_pod(
        agents=[AgentSpec("budgeted", mode="native"), AgentSpec("free", mode="native")],
        governance=Governance(budgets={"budgeted": 10}),
    )
    for _ in range(3):
        upstream.enqueue("openai", Reply.json(openai_completion()))
    budgeted = pod.openai(token=pod.tokens["budgeted"])
    free = pod.openai(token=pod.tokens["free"])
    await budgeted.chat.completions.create(model="gpt-4o", messages=PROMPT)  # spends 13 of 10
    with pytest.raises(openai.RateLimitError) as refused:
        await budgeted.chat.completions.create(model="gpt-4o", messages=PROMPT)
    assert refused.value.code == "budget_exhausted"
    await free.chat.completions.create(model="gpt-4o", messages=PROMPT)
    await free.chat.completions.create(model="gpt-4o", messages=PROMPT)
    assert len(upstream.received) == 3
    assert [r["http_status"] for r in await _audit(pod, "budgeted", 2)] == [200, 429]
    assert [r["http_status"] for r in await _audit(pod, "free", 2)] == [200, 200]


@pytest.mark.parametrize("traced", [True, False], ids=["tracing on", "tracing off"])
async def test_a_pass_through_is_traced_only_while_tracing_is_on(
    make_pod: PodFactory, upstream: StubUpstream, traced: bool
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider if traced else None)
    try:
        pod = await make_pod()
        upstream.enqueue("openai", Reply.json(openai_completion()))
        client = pod.openai(default_headers=TRACEPARENT)
        await client.chat.completions.create(model="gpt-4o", messages=PROMPT)
    finally:
        tracing.use_provider(None)
    (record,) = await _audit(pod, "agent", 1)
    names = sorted(span.name for span in exporter.get_finished_spans())
    if traced:
        assert names == ["chat gpt-4o", "invoke_agent"]
        assert record["trace_id"] == CLIENT_TRACE
    else:
        assert names == []
        assert "trace_id" not in record


STREAMED = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\ndata: [DONE]\n\n'
UPSTREAM_ANSWERS = {
    "answer": lambda: Reply.json(openai_completion()),
    "stream": lambda: Reply.sse(STREAMED),
    "rate limited": lambda: Reply.error("openai", 429, "slow down", "rate_limit_error"),
    "server error": lambda: Reply.error("openai", 500, "boom"),
    "refused": lambda: Reply.error("openai", 400, "bad request", "invalid_request_error"),
    "not JSON": lambda: Reply.garbage(502),
    "reset": lambda: Reply(reset=True),
}


@pytest.mark.parametrize("mode", ["native", "mediated"])
@pytest.mark.parametrize("answer", UPSTREAM_ANSWERS)
async def test_a_plain_route_answers_as_the_failover_walk_does(
    make_pod: PodFactory, upstream: StubUpstream, answer: str, mode: Mode
) -> None:
    """The plain path (one target sent to directly, ``RoutePlan.walks`` false) against the
    general path it stands for: the same provider with a first-byte bound nobody reaches
    walks, and the caller gets the same status, type and body, passed through (native) or
    as a mediated model call (docs/architecture.md, "Shortcuts")."""
    stub = {"api": "openai", "base_url": upstream.openai_url, "key_env": "OPENAI_API_KEY"}
    direct, bounded = (
        Provider(**stub, models=["*"]),
        Provider(**stub, models=["*"], first_byte_timeout_ms=60_000),
    )
    assert not plan_route("chat", [("stub", direct, "gpt-4o")]).walks
    assert plan_route("chat", [("stub", bounded, "gpt-4o")]).walks
    # A mediated agent with a tool to inject is driven through its model calls.
    tools = [http_tool("desk", "quote", URL)] if mode == "mediated" else []
    agents = [AgentSpec("agent", tools=tools, mode=mode)]
    plain = await make_pod(agents=agents, providers={"stub": direct})
    walked = await make_pod(agents=agents, providers={"stub": bounded})
    replies = []
    for pod in (plain, walked):
        upstream.enqueue("openai", UPSTREAM_ANSWERS[answer]())
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                pod.sidecar.openai_base_url + "/chat/completions",
                json={"model": "gpt-4o", "messages": PROMPT, "stream": answer == "stream"},
                headers={"Authorization": f"Bearer {pod.token}"},
            ) as response,
        ):
            replies.append((response.status, response.content_type, await response.read()))
    assert replies[0] == replies[1]
