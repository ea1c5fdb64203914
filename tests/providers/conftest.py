"""Pods with several providers and keys (SPEC §14): three local upstreams speaking both
protocols, a real tool service, an in-process sidecar, the real SDKs as clients."""

from __future__ import annotations

import asyncio
import inspect
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from clawpod.sidecar.manifest import Governance, Price, Provider, RouteTarget, ToolPolicy
from tests.mediation.conftest import TRADING_TOKEN, desk_tools
from tests.support.builds import AgentSpec, write_build
from tests.support.services import ToolService
from tests.support.sidecar import RunningSidecar, audit_records, start_sidecar
from tests.support.upstream import StubUpstream

KEYS = {
    "OPENAI_KEY_A": "sk-pool-openai-key-a-1111",
    "OPENAI_KEY_B": "sk-pool-openai-key-b-2222",
    "AZURE_KEY": "sk-azure-east-key-3333",
    "ANTHROPIC_KEY_A": "sk-ant-pool-key-a-4444",
    "ANTHROPIC_KEY_B": "sk-ant-pool-key-b-5555",
    "BEDROCK_KEY": "sk-ant-second-key-6666",
}


def closed_port_url() -> str:
    """A local address nothing listens on: connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@dataclass
class Upstreams:
    primary: StubUpstream
    secondary: StubUpstream
    third: StubUpstream


@dataclass
class ProviderPod:
    sidecar: RunningSidecar
    upstreams: Upstreams
    service: ToolService
    tokens: dict[str, str]
    state_dir: Path
    build_root: Path
    env: dict[str, str]
    clients: list[Any] = field(default_factory=list)

    async def restart(self) -> None:
        await self.sidecar.close()
        self.sidecar = await start_sidecar(self.build_root, self.state_dir, env=self.env)

    def openai(self, agent: str = "analyst", **kwargs: Any) -> openai.AsyncOpenAI:
        kwargs.setdefault("max_retries", 0)
        client = openai.AsyncOpenAI(
            base_url=self.sidecar.openai_base_url, api_key=self.tokens[agent], **kwargs
        )
        self.clients.append(client)
        return client

    def anthropic(self, agent: str = "analyst", **kwargs: Any) -> anthropic.AsyncAnthropic:
        kwargs.setdefault("max_retries", 0)
        client = anthropic.AsyncAnthropic(
            base_url=self.sidecar.anthropic_base_url, api_key=self.tokens[agent], **kwargs
        )
        self.clients.append(client)
        return client

    async def audit(self, count: int = 1, agent: str = "analyst") -> list[dict[str, Any]]:
        """The agent's audit records once there are ``count`` (each is written after the
        answer went out)."""
        for _ in range(500):
            records = audit_records(self.state_dir, agent)
            if len(records) >= count:
                return records
            await asyncio.sleep(0.01)
        raise AssertionError(f"expected {count} audit records")

    async def metrics(self) -> str:
        import aiohttp

        async with (
            aiohttp.ClientSession() as session,
            session.get(self.sidecar.admin_url + "/metrics") as response,
        ):
            return await response.text()

    async def close(self) -> None:
        for client in self.clients:
            closed = client.close()
            if inspect.isawaitable(closed):
                await closed
        await self.sidecar.close()


def pool_providers(
    upstreams: Upstreams, *, first_byte_timeout_ms: int | None = None, primary_url: str = ""
) -> dict[str, Provider]:
    """openai (two keys) and azure-east (one) for Chat Completions; anthropic (two keys) and
    bedrock (one) for Messages. The primary of each protocol is ``upstreams.primary``."""
    primary = primary_url or upstreams.primary.url
    return {
        "openai": Provider(
            api="openai",
            base_url=primary + "/v1",
            key_env=["OPENAI_KEY_A", "OPENAI_KEY_B"],
            models=["gpt-*"],
            first_byte_timeout_ms=first_byte_timeout_ms,
            prices={"gpt-4o-special": Price(input=1.0, cached_input=0.5, output=2.0)},
        ),
        "azure-east": Provider(
            api="openai", base_url=upstreams.secondary.url + "/v1", key_env="AZURE_KEY", models=[]
        ),
        "anthropic": Provider(
            api="anthropic",
            base_url=primary,
            key_env=["ANTHROPIC_KEY_A", "ANTHROPIC_KEY_B"],
            models=["claude-*"],
            first_byte_timeout_ms=first_byte_timeout_ms,
        ),
        "bedrock": Provider(
            api="anthropic", base_url=upstreams.secondary.url, key_env="BEDROCK_KEY", models=[]
        ),
    }


ROUTES = {
    "gpt-4o*": [
        RouteTarget(provider="openai"),
        RouteTarget(provider="azure-east", model="gpt-4o-east"),
    ],
    "claude-*": [RouteTarget(provider="anthropic"), RouteTarget(provider="bedrock")],
}

PodMaker = Callable[..., Awaitable[ProviderPod]]


@pytest.fixture
async def upstreams() -> AsyncIterator[Upstreams]:
    stubs = [StubUpstream(), StubUpstream(), StubUpstream()]
    for stub in stubs:
        await stub.start()
    yield Upstreams(*stubs)
    for stub in stubs:
        await stub.close()


@pytest.fixture
async def make_pod(
    tmp_path: Path, upstreams: Upstreams, service: ToolService
) -> AsyncIterator[PodMaker]:
    pods: list[ProviderPod] = []

    async def factory(
        *,
        providers: dict[str, Provider] | None = None,
        routes: dict[str, list[RouteTarget]] | None = None,
        governance: Governance | None = None,
        mode: str = "native",
        agent_ids: tuple[str, ...] = ("analyst",),
        **provider_options: Any,
    ) -> ProviderPod:
        """``agent_ids``: the pod's agents, all alike (an attacker and a bystander)."""
        root = tmp_path / f"build{len(pods)}"
        policy = ToolPolicy(timeout_per_tool_ms=2000, total_timeout_ms=20000)
        tools = desk_tools(service.url) if mode == "mediated" else []
        agent_specs = [AgentSpec(a, tools, mode=mode, policy=policy) for a in agent_ids]  # type: ignore[arg-type]
        tokens = write_build(
            root,
            agent_specs,
            providers or pool_providers(upstreams, **provider_options),
            routes=ROUTES if routes is None else routes,
            governance=governance,
        )
        env = {**KEYS, "TRADING_TOKEN": TRADING_TOKEN, "CLAW_SSE_KEEPALIVE_MS": "100"}
        state_dir = tmp_path / f"state{len(pods)}"
        sidecar = await start_sidecar(root, state_dir, env=env)
        pod = ProviderPod(sidecar, upstreams, service, tokens, state_dir, root, env)
        pods.append(pod)
        return pod

    yield factory
    for pod in pods:
        await pod.close()
