"""Fallback targets of another protocol (contract §14 with §18), and hidden rounds that come
back across a translation: a mediated tool call runs once whichever provider answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from clawpod.sidecar.manifest import RouteTarget, ToolPolicy
from tests.mediation.conftest import TRADING_TOKEN, desk_tools
from tests.support.builds import AgentSpec, write_build
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, start_sidecar
from tests.support.upstream import Reply, StubUpstream
from tests.translation.conftest import (
    TranslatingPod,
    answer_text,
    calls_reply,
    providers,
    text_reply,
)

ASK = [{"role": "user", "content": "What is AAPL at?"}]


@pytest.fixture
async def falling_back(
    tmp_path: Path, upstream: StubUpstream, service: ToolService
) -> AsyncIterator[TranslatingPod]:
    """claude-* goes to Anthropic first, then to the Chat-only local server."""
    policy = ToolPolicy(timeout_per_tool_ms=2000, total_timeout_ms=20000)
    agents = [AgentSpec("analyst", desk_tools(service.url), policy=policy), AgentSpec("plain", [])]
    routes = {
        "claude-*": [
            RouteTarget(provider="anthropic"),
            RouteTarget(provider="local", model="local-model"),
        ]
    }
    tokens = write_build(tmp_path / "build", agents, providers(upstream), routes=routes)
    env = {**TEST_PROVIDER_KEYS, "TRADING_TOKEN": TRADING_TOKEN}
    sidecar = await start_sidecar(tmp_path / "build", tmp_path / "state", env=env)
    yield TranslatingPod(sidecar, upstream, service, tokens, tmp_path / "state")
    await sidecar.close()


async def test_a_fallback_of_another_protocol_answers_in_the_callers(
    falling_back: TranslatingPod,
) -> None:
    pod = falling_back
    pod.script("messages", Reply.error("anthropic", 529, "busy", type="overloaded_error"))
    pod.script("chat", text_reply("chat", "AAPL trades at 1."))
    answer = await pod.ask("messages", "plain", "claude-sonnet-4-6")
    assert answer_text("messages", answer) == "AAPL trades at 1."
    (sent,) = pod.sent("chat")
    assert sent["model"] == "local-model"
    (record,) = pod.audit("plain")
    assert [a["provider"] for a in record["providers"]] == ["anthropic", "local"]


async def test_a_mediated_failover_across_protocols_runs_the_tool_once(
    falling_back: TranslatingPod,
) -> None:
    """Anthropic asks for the tool, then fails; the Chat server gets the hidden round (call
    and result) translated and answers. The service saw one call."""
    pod = falling_back
    pod.script(
        "messages",
        calls_reply("messages", ("toolu_1", "desk_quote", {"symbol": "AAPL"})),
        Reply.error("anthropic", 500, "down"),
    )
    pod.script("chat", text_reply("chat", "AAPL trades at 1."))
    answer = await pod.ask("messages", "analyst", "claude-sonnet-4-6")
    assert answer_text("messages", answer) == "AAPL trades at 1."
    assert [r.path for r in pod.service.requests] == ["/quotes/AAPL"]
    (sent,) = pod.sent("chat")
    assistant = next(m for m in sent["messages"] if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["id"] == "toolu_1"
    result = next(m for m in sent["messages"] if m["role"] == "tool")
    assert result["tool_call_id"] == "toolu_1"
    assert orjson.loads(result["content"])["data"]["path"] == "/quotes/AAPL"


async def test_hidden_rounds_come_back_translated_when_the_conversation_continues(
    translating_pod: TranslatingPod,
) -> None:
    """Claude Code against a Chat-only server: the runner saw only the answer; its next turn
    reaches the server with the hidden call and result back in place."""
    pod = translating_pod
    pod.script(
        "chat",
        calls_reply("chat", ("call_1", "desk_quote", {"symbol": "AAPL"})),
        text_reply("chat", "AAPL trades at 1."),
        text_reply("chat", "Yes."),
    )
    async with pod.anthropic("analyst") as client:
        first = await client.messages.create(model="local-model", max_tokens=99, messages=ASK)
        again = [
            *ASK,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "Is that up?"},
        ]
        await client.messages.create(model="local-model", max_tokens=99, messages=again)
    *_, third = pod.sent("chat")
    roles = [m["role"] for m in third["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    assert third["messages"][1]["tool_calls"][0]["id"] == "call_1"
    assert [r.path for r in pod.service.requests] == ["/quotes/AAPL"]
