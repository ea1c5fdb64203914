"""Claude Code (Messages) and Codex CLI (Responses), unchanged, against a provider that serves
Chat Completions only (a local server's shape, contract §18): the sidecar translates their
streamed requests and the provider's streams both ways, runs the sidecar tool once and hands
the runner's own tool back in the runner's protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clawpod.sidecar.manifest import Provider
from tests.mediation.conftest import TRADING_TOKEN, desk_tools
from tests.runners.conftest import RUNNERS_DIR, RunnerPod, runner_binary, serving
from tests.runners.provider import QUOTE, RUNNER_MARK, TRADE, ScriptedProvider
from tests.runners.recording import RecordingProxy, recording, save
from tests.runners.test_claude_code import QUIET
from tests.runners.test_codex import codex_exec
from tests.support.builds import AgentSpec
from tests.support.sidecar import audit_records

pytestmark = pytest.mark.runners
CHAT = "/v1/chat/completions"
# The runners' own tools the scripted model calls: Claude Code's Bash, Codex's exec_command.
CLAUDE_BASH = "Bash"
CODEX_SHELL = "exec_command"
# A local model's name (docs/translation.md: Claude Code on a local model): not a Claude id.
LOCAL_MODEL = "local-qwen"
CLAUDE_VERSION = "2.1.330"


@pytest.fixture
async def chat_only_pod(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[RunnerPod]:
    """The mediated agent with the desk tools; every model routed to one provider that
    speaks Chat Completions only. ``@pytest.mark.plan(...)`` sets the model's plan,
    ``@pytest.mark.failures(n)`` its failures after it."""
    marker = request.node.get_closest_marker("plan")
    failures = request.node.get_closest_marker("failures")
    provider = await ScriptedProvider(
        plan=marker.args if marker else (QUOTE,), failures=failures.args[0] if failures else 0
    ).start()
    local = Provider(
        api="openai",
        protocols=["chat"],
        base_url=provider.url + "/v1",
        key_env="OPENAI_API_KEY",
        models=["claude-*", "gpt-*", LOCAL_MODEL],
    )

    def agents(service_url: str) -> list[AgentSpec]:
        return [AgentSpec("mediated", desk_tools(service_url))]

    async with serving(tmp_path, provider, agents, {"local": local}) as pod:
        yield pod


def only_chat_went_upstream(pod: RunnerPod) -> None:
    paths = {r.path for r in pod.provider.received}
    assert paths == {CHAT}, paths
    assert any(r.json.get("stream") for r in pod.provider.received)  # streamed, translated


def runner_result_went_up(pod: RunnerPod) -> bool:
    """The runner's own tool ran on the runner's side: its output came back to the provider
    as a Chat ``tool`` message."""
    return any(
        m.get("role") == "tool" and RUNNER_MARK in str(m.get("content"))
        for r in pod.provider.received
        for m in r.json.get("messages") or []
    )


@pytest.mark.plan(QUOTE, CLAUDE_BASH)
async def test_claude_code_against_a_chat_only_provider(chat_only_pod: RunnerPod) -> None:
    pod = chat_only_pod
    claude = runner_binary("claude")
    argv = [
        str(claude),
        "-p",
        "What is AAPL at? Use the quote tool, then run the marker command.",
        "--model",
        "claude-sonnet-4-6",
        "--allowedTools",
        CLAUDE_BASH,
    ]
    code, out, err = await pod.run(argv, pod.env("mediated", **QUIET))
    assert code == 0, (out + err)[-3000:]
    assert "QUOTE-OK /quotes/AAPL" in out and "RUNNER-OK" in out
    (call,) = pod.quote_calls()  # the sidecar tool, exactly once
    assert call.headers["Authorization"] == f"Bearer {TRADING_TOKEN}"
    only_chat_went_upstream(pod)
    records = audit_records(pod.sidecar.state.state_dir, "mediated")
    assert any((r.get("translation") or {}).get("to") == ["chat"] for r in records)
    assert runner_result_went_up(pod)  # Claude Code ran Bash itself


@pytest.mark.plan(QUOTE, CODEX_SHELL)
async def test_codex_against_a_chat_only_provider(chat_only_pod: RunnerPod) -> None:
    pod = chat_only_pod
    env = pod.env("mediated")
    argv = codex_exec(
        env,
        "What is AAPL at? Use the quote tool, then run the marker command.",
        "--dangerously-bypass-approvals-and-sandbox",
    )
    code, out, err = await pod.run(argv, env)
    assert code == 0, (out + err)[-3000:]
    assert "QUOTE-OK /quotes/AAPL" in out and "RUNNER-OK" in out
    (call,) = pod.quote_calls()
    assert call.headers["Authorization"] == f"Bearer {TRADING_TOKEN}"
    only_chat_went_upstream(pod)
    assert runner_result_went_up(pod)  # Codex ran its shell itself
    # Codex's default offer, unchanged: its sub-agents' namespace reached the model as flat
    # functions, and its provider-run web search was left out (docs/translation.md).
    offered = {t["function"]["name"] for r in pod.provider.received for t in r.json["tools"]}
    assert any(name.startswith("multi_agent_v1__") for name in offered), offered
    records = audit_records(pod.sidecar.state.state_dir, "mediated")
    dropped = {d for r in records for d in (r.get("translation") or {}).get("dropped", [])}
    assert any("web_search" in d for d in dropped), dropped


@pytest.mark.plan(TRADE)
@pytest.mark.failures(1)
async def test_claude_code_on_a_local_model_name_retries_once(chat_only_pod: RunnerPod) -> None:
    """Claude Code 2.1.330 with a model id that is not Claude's sends a ``system`` message
    inside ``messages`` (its environment), which translation refused with 400 on every
    request; the provider then fails after the order, Claude Code retries: one order."""
    pod = chat_only_pod
    claude = runner_binary("claude")
    proxy = await RecordingProxy(pod.sidecar.url).start()
    try:
        env = pod.env("mediated", **QUIET) | {"ANTHROPIC_BASE_URL": proxy.url}
        argv = [str(claude), "-p", "Buy one AAPL.", "--model", LOCAL_MODEL]
        code, out, err = await pod.run(argv, env)
    finally:
        await proxy.close()
    if recording():
        meta = {"runner": "claude-code", "version": CLAUDE_VERSION, "api": "messages"}
        paths = [str(pod.home), str(RUNNERS_DIR)]
        save(f"claude-code-{CLAUDE_VERSION}-local-model-retry", meta, proxy.exchanges, paths)
    assert code == 0, (out + err)[-3000:]
    assert "TRADE-OK" in out
    assert len(pod.orders()) == 1
    assert pod.provider.failures == 0  # the provider did fail after the order
    only_chat_went_upstream(pod)
    records = audit_records(pod.sidecar.state.state_dir, "mediated")
    assert any(r.get("resumed_from") for r in records)  # and Claude Code's retry resumed it
