"""A mediated pod for SDK-driven tests: stub upstream, real tool services, in-process sidecar."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from clawpod.sidecar.manifest import ManagedTool, Provider, StreamTools, ToolAuth, ToolPolicy
from tests.support.builds import TRADE_SCHEMA, AgentSpec, http_tool, providers_for, write_build
from tests.support.local_servers import LocalServer
from tests.support.services import ToolService
from tests.support.sidecar import (
    TEST_PROVIDER_KEYS,
    RunningSidecar,
    audit_records,
    start_sidecar,
)
from tests.support.upstream import StubUpstream

TRADING_TOKEN = "trading-secret-value"
QUOTE_SCHEMA = {
    "type": "object",
    "properties": {"symbol": {"type": "string", "minLength": 1}},
    "required": ["symbol"],
}


def desk_tools(url: str) -> list[ManagedTool]:
    bearer = ToolAuth(type="bearer", env="TRADING_TOKEN")
    return [
        http_tool(
            "desk",
            "quote",
            url,
            path="/quotes/{symbol}",
            schema=QUOTE_SCHEMA,
            annotations={"readOnlyHint": True},
            auth=bearer,
        ),
        http_tool(
            "desk",
            "trade",
            url,
            method="POST",
            path="/trades",
            schema=TRADE_SCHEMA,
            annotations={"destructiveHint": True},
            body_key="trade",
            auth=bearer,
        ),
        http_tool("desk", "slow", url, path="/slow", annotations={"readOnlyHint": True}),
    ]


@dataclass
class MediatedPod:
    sidecar: RunningSidecar
    upstream: StubUpstream
    service: ToolService
    tokens: dict[str, str]
    state_dir: Path
    build_root: Path
    env: dict[str, str]
    clients: list[Any] = field(default_factory=list)

    def openai(self, *, sync: bool = False, agent: str = "analyst", **kwargs: Any) -> Any:
        cls = openai.OpenAI if sync else openai.AsyncOpenAI
        client = cls(
            base_url=self.sidecar.openai_base_url,
            api_key=self.tokens[agent],
            max_retries=0,
            **kwargs,
        )
        self.clients.append(client)
        return client

    def anthropic(self, *, sync: bool = False, agent: str = "analyst", **kwargs: Any) -> Any:
        cls = anthropic.Anthropic if sync else anthropic.AsyncAnthropic
        client = cls(
            base_url=self.sidecar.anthropic_base_url,
            api_key=self.tokens[agent],
            max_retries=0,
            **kwargs,
        )
        self.clients.append(client)
        return client

    def sent(self, api: str) -> list[dict[str, Any]]:
        """Bodies the sidecar sent upstream on this API's route."""
        return [r.json for r in self.upstream.requests_to(api)]

    def audit(self, agent: str = "analyst") -> list[dict[str, Any]]:
        return audit_records(self.state_dir, agent)

    async def wait_for_audit(self, count: int, agent: str = "analyst") -> list[dict[str, Any]]:
        for _ in range(500):
            records = self.audit(agent)
            if len(records) >= count:
                return records
            await asyncio.sleep(0.01)
        raise AssertionError(f"expected {count} audit records, found {len(self.audit(agent))}")

    async def restart(self) -> None:
        await self.sidecar.close()
        self.sidecar = await start_sidecar(self.build_root, self.state_dir, env=self.env)

    async def close(self) -> None:
        for client in self.clients:
            closed = client.close()
            if inspect.isawaitable(closed):
                await closed
        await self.sidecar.close()


PodFactory = Callable[..., Awaitable[MediatedPod]]


@pytest.fixture
async def make_pod(
    tmp_path: Path, upstream: StubUpstream, service: ToolService
) -> AsyncIterator[PodFactory]:
    pods: list[MediatedPod] = []

    async def factory(
        *,
        on_mixed: str = "refuse",
        policy: ToolPolicy | None = None,
        tool_injection: str = "auto",
        **config: Any,
    ) -> MediatedPod:
        root = tmp_path / f"build{len(pods)}"
        policy = policy or ToolPolicy(timeout_per_tool_ms=2000, total_timeout_ms=20000)
        agents = [
            AgentSpec(
                "analyst",
                desk_tools(service.url),
                on_mixed=on_mixed,
                policy=policy,
                tool_injection=tool_injection,
            ),
            AgentSpec("ops", [http_tool("ops", "restart", service.url, method="POST")]),
        ]
        tokens = write_build(
            root,
            agents,
            providers_for(upstream.openai_url, upstream.anthropic_url),
            **config,
        )
        env = {**TEST_PROVIDER_KEYS, "TRADING_TOKEN": TRADING_TOKEN, "CLAW_SSE_KEEPALIVE_MS": "100"}
        state_dir = tmp_path / f"state{len(pods)}"
        sidecar = await start_sidecar(root, state_dir, env=env)
        pod = MediatedPod(sidecar, upstream, service, tokens, state_dir, root, env)
        pods.append(pod)
        return pod

    yield factory
    for pod in pods:
        await pod.close()


@pytest.fixture
async def pod(make_pod: PodFactory) -> MediatedPod:
    return await make_pod()


Sidecar = Callable[..., Awaitable[tuple[RunningSidecar, str]]]


@pytest.fixture
async def sidecar_for(tmp_path: Path, service: ToolService) -> AsyncIterator[Sidecar]:
    """A sidecar whose one provider is ``server``, with ``stream-tools`` as given."""
    running: list[RunningSidecar] = []

    async def start(
        server: LocalServer, stream_tools: StreamTools = "auto", *, tools: bool = True
    ) -> tuple[RunningSidecar, str]:
        """``tools=False``: the agent has nothing to inject, so its requests pass through."""
        root = tmp_path / f"build{len(running)}"
        provider = Provider(
            api="openai",
            base_url=server.url,
            key_env="OPENAI_API_KEY",
            models=["local-*"],
            stream_tools=stream_tools,
        )
        policy = ToolPolicy(timeout_per_tool_ms=2000, total_timeout_ms=20000)
        agent = AgentSpec("analyst", desk_tools(service.url) if tools else [], policy=policy)
        tokens = write_build(root, [agent], {"local": provider})
        env = {**TEST_PROVIDER_KEYS, "TRADING_TOKEN": TRADING_TOKEN}
        sidecar = await start_sidecar(root, tmp_path / f"state{len(running)}", env=env)
        running.append(sidecar)
        return sidecar, tokens["analyst"]

    yield start
    for sidecar in running:
        await sidecar.close()
