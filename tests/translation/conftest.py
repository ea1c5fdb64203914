"""A pod whose providers each speak one protocol, on one local stub upstream, and the real
SDKs as callers: every caller protocol can reach every provider protocol (contract §18)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

from clawpod.sidecar.manifest import Provider, ToolPolicy
from tests.mediation.conftest import TRADING_TOKEN, desk_tools
from tests.mediation.scripted import an_calls, an_text, oa_calls, oa_text
from tests.support import responses as rs
from tests.support.builds import AgentSpec, write_build
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, RunningSidecar, audit_records, start_sidecar
from tests.support.upstream import Reply, StubUpstream

PROTOCOLS = ("chat", "responses", "messages")
# The model each provider protocol is reached by, and the stub route it answers on.
MODEL = {"chat": "local-model", "responses": "resp-model", "messages": "claude-sonnet-4-6"}
ROUTE = {"chat": "openai", "responses": "responses", "messages": "anthropic"}
DIRECTIONS = [(c, t) for c in PROTOCOLS for t in PROTOCOLS if c != t]


def providers(upstream: StubUpstream) -> dict[str, Provider]:
    return {
        "local": Provider(
            api="openai",
            protocols=["chat"],
            base_url=upstream.openai_url,
            key_env="OPENAI_API_KEY",
            models=["local-*"],
        ),
        "gateway": Provider(
            api="openai",
            protocols=["responses"],
            base_url=upstream.openai_url,
            key_env="OPENAI_API_KEY",
            models=["resp-*"],
        ),
        "anthropic": Provider(
            api="anthropic",
            base_url=upstream.anthropic_url,
            key_env="ANTHROPIC_API_KEY",
            models=["claude-*"],
        ),
    }


def text_reply(protocol: str, text: str, tokens: int = 10) -> Reply:
    if protocol == "chat":
        return Reply.json(oa_text(text, tokens))
    if protocol == "messages":
        return Reply.json(an_text(text, tokens))
    return Reply.json(rs.response(rs.message(text), input_tokens=tokens))


def calls_reply(protocol: str, *calls: tuple[str, str, Any]) -> Reply:
    if protocol == "chat":
        return Reply.json(oa_calls(*calls))
    if protocol == "messages":
        return Reply.json(an_calls(*calls))
    return Reply.json(rs.response(*(rs.call(i, n, a) for i, n, a in calls)))


@dataclass
class TranslatingPod:
    sidecar: RunningSidecar
    upstream: StubUpstream
    service: ToolService
    tokens: dict[str, str]
    state_dir: Path

    def script(self, protocol: str, *replies: Reply) -> None:
        self.upstream.enqueue(ROUTE[protocol], *replies)

    def sent(self, protocol: str) -> list[dict[str, Any]]:
        return [r.json for r in self.upstream.requests_to(ROUTE[protocol])]

    def audit(self, agent: str) -> list[dict[str, Any]]:
        return audit_records(self.state_dir, agent)

    def openai(self, agent: str = "analyst") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.sidecar.openai_base_url, api_key=self.tokens[agent], max_retries=0
        )

    def anthropic(self, agent: str = "analyst") -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            base_url=self.sidecar.anthropic_base_url, api_key=self.tokens[agent], max_retries=0
        )

    async def ask(self, caller: str, agent: str, model: str, **extra: Any) -> Any:
        """One request in the caller's protocol through its real SDK."""
        prompt = extra.pop("prompt", "What is AAPL at?")
        if caller == "messages":
            async with self.anthropic(agent) as client:
                return await client.messages.create(
                    model=model,
                    max_tokens=256,
                    messages=[{"role": "user", "content": prompt}],
                    **extra,
                )
        async with self.openai(agent) as client:
            if caller == "chat":
                return await client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": prompt}], **extra
                )
            return await client.responses.create(model=model, input=prompt, **extra)


def answer_text(caller: str, answer: Any) -> str:
    if caller == "chat":
        return answer.choices[0].message.content or ""
    if caller == "messages":
        return "".join(b.text for b in answer.content if b.type == "text")
    return answer.output_text


def answer_calls(caller: str, answer: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, name, arguments) of the calls an answer hands to the runner."""
    if caller == "chat":
        found = answer.choices[0].message.tool_calls or []
        return [(c.id, c.function.name, orjson.loads(c.function.arguments)) for c in found]
    if caller == "messages":
        return [(b.id, b.name, b.input) for b in answer.content if b.type == "tool_use"]
    return [
        (i.call_id, i.name, orjson.loads(i.arguments))
        for i in answer.output
        if i.type == "function_call"
    ]


@pytest.fixture
async def translating_pod(
    tmp_path: Path, upstream: StubUpstream, service: ToolService
) -> AsyncIterator[TranslatingPod]:
    policy = ToolPolicy(timeout_per_tool_ms=2000, total_timeout_ms=20000)
    agents = [
        AgentSpec("analyst", desk_tools(service.url), policy=policy),
        AgentSpec("plain", []),
        AgentSpec("other", []),
    ]
    root = tmp_path / "build"
    tokens = write_build(root, agents, providers(upstream))
    env = {**TEST_PROVIDER_KEYS, "TRADING_TOKEN": TRADING_TOKEN}
    state_dir = tmp_path / "state"
    sidecar = await start_sidecar(root, state_dir, env=env)
    yield TranslatingPod(sidecar, upstream, service, tokens, state_dir)
    await sidecar.close()


PodFixture = Callable[..., Awaitable[TranslatingPod]]
