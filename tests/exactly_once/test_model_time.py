"""Model time and tool time are separate budgets (SPEC §8.2): a long generation never spends
the tool budget, and each model call is bounded by its provider's timeout-ms."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from clawpod.sidecar.manifest import ToolPolicy
from tests.mediation.conftest import TRADING_TOKEN, desk_tools
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, RunningSidecar, start_sidecar
from tests.support.upstream import Reply, StubUpstream

ASK = [{"role": "user", "content": "What is AAPL at?"}]
QUOTE = ("q1", "desk_quote", {"symbol": "AAPL"})


async def sidecar_with(
    root: Path, upstream: StubUpstream, service: ToolService, *, policy: ToolPolicy, **provider: int
) -> tuple[RunningSidecar, str]:
    providers = {
        name: spec.model_copy(update=provider)
        for name, spec in providers_for(upstream.openai_url, upstream.anthropic_url).items()
    }
    tokens = write_build(
        root / "build", [AgentSpec("analyst", desk_tools(service.url), policy=policy)], providers
    )
    env = {**TEST_PROVIDER_KEYS, "TRADING_TOKEN": TRADING_TOKEN}
    return await start_sidecar(root / "build", root / "state", env=env), tokens["analyst"]


@pytest.fixture
async def running() -> AsyncIterator[list[RunningSidecar]]:
    started: list[RunningSidecar] = []
    yield started
    for sidecar in started:
        await sidecar.close()


async def test_a_generation_longer_than_the_tool_budget_is_not_a_timeout(
    tmp_path: Path,
    upstream: StubUpstream,
    service: ToolService,
    running: list[RunningSidecar],
) -> None:
    """The issue's finding: a model call longer than total-timeout-ms returned 504 with no tool
    run. The tool budget here is far below what the two model calls take together."""
    policy = ToolPolicy(timeout_per_tool_ms=200, total_timeout_ms=250)
    sidecar, token = await sidecar_with(tmp_path, upstream, service, policy=policy)
    running.append(sidecar)
    upstream.enqueue(
        "openai",
        Reply.json(oa_calls(QUOTE), delay=0.4),
        Reply.json(oa_text("AAPL is 1."), delay=0.4),
    )
    async with openai.AsyncOpenAI(
        base_url=sidecar.openai_base_url, api_key=token, max_retries=0
    ) as client:
        completion = await client.chat.completions.create(model="gpt-4o", messages=ASK)
    assert completion.choices[0].message.content == "AAPL is 1."
    assert len(service.requests) == 1


async def test_each_model_call_is_bounded_by_its_providers_timeout(
    tmp_path: Path,
    upstream: StubUpstream,
    service: ToolService,
    running: list[RunningSidecar],
) -> None:
    sidecar, token = await sidecar_with(
        tmp_path, upstream, service, policy=ToolPolicy(), timeout_ms=300
    )
    running.append(sidecar)
    upstream.enqueue("openai", Reply.json(oa_calls(QUOTE)), Reply.hang(30))
    async with openai.AsyncOpenAI(
        base_url=sidecar.openai_base_url, api_key=token, max_retries=0
    ) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=ASK)
    assert caught.value.status_code == 504
    assert caught.value.body["code"] == "upstream_timeout"
