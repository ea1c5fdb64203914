"""Fixtures for sidecar server tests: a stub upstream and a sidecar serving a small build."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from clawpod.sidecar.manifest import Provider
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.sidecar import RunningSidecar, start_sidecar
from tests.support.upstream import StubUpstream


@dataclass
class Pod:
    """A running sidecar, its stub upstream and the agents' tokens."""

    sidecar: RunningSidecar
    upstream: StubUpstream
    tokens: dict[str, str]
    state_dir: Path
    clients: list[Any] = field(default_factory=list)

    @property
    def token(self) -> str:
        return self.tokens["agent"]

    def openai(self, *, sync: bool = False, token: str | None = None, **kwargs: Any) -> Any:
        """An OpenAI SDK client pointed at the sidecar (no retries unless asked)."""
        kwargs.setdefault("max_retries", 0)
        cls = openai.OpenAI if sync else openai.AsyncOpenAI
        client = cls(base_url=self.sidecar.openai_base_url, api_key=token or self.token, **kwargs)
        self.clients.append(client)
        return client

    def anthropic(self, *, sync: bool = False, token: str | None = None, **kwargs: Any) -> Any:
        """An Anthropic SDK client pointed at the sidecar (no retries unless asked)."""
        kwargs.setdefault("max_retries", 0)
        cls = anthropic.Anthropic if sync else anthropic.AsyncAnthropic
        client = cls(
            base_url=self.sidecar.anthropic_base_url, api_key=token or self.token, **kwargs
        )
        self.clients.append(client)
        return client

    async def close(self) -> None:
        for client in self.clients:
            closed = client.close()
            if inspect.isawaitable(closed):
                await closed
        await self.sidecar.close()

    def audit_lines(self, agent: str = "agent") -> list[str]:
        path = self.state_dir / "audit" / f"{agent}.jsonl"
        return path.read_text().splitlines() if path.exists() else []


PodFactory = Callable[..., Awaitable[Pod]]


@pytest.fixture
async def make_pod(tmp_path: Path, upstream: StubUpstream) -> AsyncIterator[PodFactory]:
    """Build and start a sidecar; by default one native agent ``agent`` and both providers."""
    started: list[Pod] = []

    async def make(
        agents: list[AgentSpec] | None = None,
        providers: dict[str, Provider] | None = None,
        env: dict[str, str] | None = None,
        **config: Any,
    ) -> Pod:
        root = tmp_path / f"build{len(started)}"
        state_dir = tmp_path / f"state{len(started)}"
        tokens = write_build(
            root,
            agents or [AgentSpec("agent", mode="native")],
            providers or providers_for(upstream.openai_url, upstream.anthropic_url),
            **config,
        )
        sidecar = await start_sidecar(root, state_dir, env)
        started.append(Pod(sidecar, upstream, tokens, state_dir))
        return started[-1]

    yield make
    for pod in started:
        await pod.close()


@pytest.fixture
async def pod(make_pod: PodFactory) -> Pod:
    return await make_pod()
