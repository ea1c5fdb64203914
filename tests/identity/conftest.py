"""A pod whose door knows an identity provider (agents' JWTs) and end users' tokens, served by
an in-process sidecar on 127.0.0.1 with the real SDKs as clients (SPEC §21)."""

from __future__ import annotations

import inspect
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from clawpod.sidecar.manifest import EndUsers, TokenIssuer, ToolPolicy
from tests.mediation.conftest import TRADING_TOKEN, desk_tools
from tests.support import secret_sweep
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.jwks_server import AUDIENCE, ISSUER, SigningKey, claims, key_set
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, RunningSidecar, audit_records, start_sidecar
from tests.support.upstream import StubUpstream

END_USER_HEADER = "x-end-user-token"
OPERATOR_TOKEN = "op-identity-" + secrets.token_urlsafe(32)


@dataclass
class DoorPod:
    sidecar: RunningSidecar
    upstream: StubUpstream
    service: ToolService
    tokens: dict[str, str]
    state_dir: Path
    agent_key: SigningKey
    user_key: SigningKey
    clients: list[Any] = field(default_factory=list)

    def agent_jwt(self, agent: str, **overrides: Any) -> str:
        return self.agent_key.sign(claims(agent, **overrides))

    def user_token(self, user: str, **overrides: Any) -> str:
        token = self.user_key.sign(claims(user, aud="clawpod-users", **overrides))
        secret_sweep.register(token)  # never in audit, logs, files or answers
        return token

    def openai(self, token: str, end_user: str | None = None) -> Any:
        headers = {END_USER_HEADER: end_user} if end_user else None
        client = openai.AsyncOpenAI(
            base_url=self.sidecar.openai_base_url,
            api_key=token,
            max_retries=0,
            default_headers=headers,
        )
        self.clients.append(client)
        return client

    def anthropic(self, token: str, end_user: str | None = None) -> Any:
        headers = {END_USER_HEADER: end_user} if end_user else None
        client = anthropic.AsyncAnthropic(
            base_url=self.sidecar.anthropic_base_url,
            api_key=token,
            max_retries=0,
            default_headers=headers,
        )
        self.clients.append(client)
        return client

    def audit(self, agent: str) -> list[dict[str, Any]]:
        return audit_records(self.state_dir, agent)

    def audit_text(self) -> str:
        return "".join(p.read_text() for p in (self.state_dir / "audit").glob("*.jsonl"))

    async def close(self) -> None:
        for client in self.clients:
            closed = client.close()
            if inspect.isawaitable(closed):
                await closed
        await self.sidecar.close()


DoorFactory = Callable[..., Awaitable[DoorPod]]


@pytest.fixture
async def make_door(
    tmp_path: Path, upstream: StubUpstream, service: ToolService
) -> AsyncIterator[DoorFactory]:
    pods: list[DoorPod] = []

    async def factory(**config: Any) -> DoorPod:
        agent_key, user_key = SigningKey("agents-1"), SigningKey("users-1")
        config.setdefault(
            "identity",
            TokenIssuer(issuer=ISSUER, audience=AUDIENCE, jwks=key_set(agent_key)),
        )
        config.setdefault(
            "end_users",
            EndUsers(
                issuer=ISSUER,
                audience="clawpod-users",
                jwks=key_set(user_key),
                header=END_USER_HEADER,
            ),
        )
        policy = ToolPolicy(timeout_per_tool_ms=2000, total_timeout_ms=20000)
        agents = [
            AgentSpec("analyst", desk_tools(service.url), policy=policy),
            AgentSpec("ops", desk_tools(service.url), policy=policy),
            AgentSpec("native", desk_tools(service.url), mode="native", policy=policy),
        ]
        root = tmp_path / f"build{len(pods)}"
        tokens = write_build(
            root, agents, providers_for(upstream.openai_url, upstream.anthropic_url), **config
        )
        env = {
            **TEST_PROVIDER_KEYS,
            "TRADING_TOKEN": TRADING_TOKEN,
            "CLAW_OPERATOR_TOKEN": OPERATOR_TOKEN,
        }
        state_dir = tmp_path / f"state{len(pods)}"
        sidecar = await start_sidecar(root, state_dir, env=env)
        pod = DoorPod(sidecar, upstream, service, tokens, state_dir, agent_key, user_key)
        pods.append(pod)
        return pod

    yield factory
    for pod in pods:
        await pod.close()


@pytest.fixture
async def door(make_door: DoorFactory) -> DoorPod:
    return await make_door()
