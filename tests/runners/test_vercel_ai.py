"""The Vercel AI SDK (ai 6 and 7 with @ai-sdk/openai, pinned in scripts/install-runners.sh),
unchanged, through the sidecar: its default ``openai(model)`` (the Responses API) in a tool loop
with a tool of its own (tests/runners/vercel_loop.mjs), against a Responses provider and one
that serves Chat Completions only (translated, contract §18)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clawpod.sidecar.manifest import Provider
from tests.mediation.conftest import desk_tools
from tests.runners.conftest import RUNNERS_DIR, RunnerPod, runner_binary, serving
from tests.runners.provider import NOTE, TRADE, ScriptedProvider
from tests.runners.recording import RecordingProxy, recording, save
from tests.support.builds import AgentSpec, providers_for
from tests.support.sidecar import audit_records

pytestmark = pytest.mark.runners
LOOP = Path(__file__).with_name("vercel_loop.mjs")
VERSIONS = {"ai6": "6.0.333", "ai7": "7.0.185"}


@pytest.fixture(params=["responses", "chat-only"])
async def loop_pod(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[RunnerPod]:
    """The mediated agent with the desk tools; the model orders, says a sentence and calls the
    SDK's own tool, then fails once. ``chat-only``: its provider serves Chat Completions only."""
    provider = await ScriptedProvider(plan=(TRADE, NOTE), failures=1, narrate=True).start()
    providers = providers_for(provider.url + "/v1")
    if request.param == "chat-only":
        local = Provider(
            api="openai",
            protocols=["chat"],
            base_url=provider.url + "/v1",
            key_env="OPENAI_API_KEY",
            models=["gpt-*"],
        )
        providers = {"local": local}

    def agents(service_url: str) -> list[AgentSpec]:
        return [AgentSpec("mediated", desk_tools(service_url))]

    async with serving(tmp_path, provider, agents, providers) as pod:
        yield pod


@pytest.mark.parametrize("mode", ["generate", "stream"])
@pytest.mark.parametrize("sdk", sorted(VERSIONS))
async def test_a_managed_tool_then_its_own_with_text_in_the_call_turn(
    loop_pod: RunnerPod, sdk: str, mode: str, request: pytest.FixtureRequest
) -> None:
    """The order runs in a hidden round; the model then says a sentence and calls the SDK's
    own tool, and the SDK echoes that turn as an ``item_reference`` to the sentence beside the
    whole ``function_call`` (the hidden round was lost and the order placed again; translated,
    the reference was refused); the provider then fails once and the SDK's own retry runs:
    one order."""
    runner_pod = loop_pod
    translated = "chat-only" in request.node.callspec.id
    node = runner_binary("node")
    if not (RUNNERS_DIR / f"js-{sdk}" / "node_modules" / "ai").is_dir():
        pytest.skip(f"{sdk} is not installed in {RUNNERS_DIR}: run scripts/install-runners.sh")
    proxy = await RecordingProxy(runner_pod.sidecar.url).start()
    try:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(runner_pod.home),
            "AI_PREFIX": str(RUNNERS_DIR / f"js-{sdk}"),
            "OPENAI_BASE_URL": proxy.url + "/v1",
            "OPENAI_API_KEY": runner_pod.tokens["mediated"],
        }
        prompt = "Buy one AAPL, then record a note."
        code, out, err = await runner_pod.run([str(node), str(LOOP), mode, prompt], env)
    finally:
        await proxy.close()
    if recording():
        meta = {"runner": "ai", "version": VERSIONS[sdk], "api": "responses", "mode": mode}
        paths = [str(runner_pod.home), str(RUNNERS_DIR)]
        name = f"ai-{VERSIONS[sdk]}-{mode}-loop" + ("-translated" if translated else "")
        save(name, meta, proxy.exchanges, paths)
    assert code == 0, (out + err)[-3000:]
    assert "NOTE-OK TRADE-OK" in out
    assert len(runner_pod.orders()) == 1
    assert runner_pod.provider.failures == 0  # the provider did fail after the loop
    records = audit_records(runner_pod.sidecar.state.state_dir, "mediated")
    assert any(r.get("hidden_rounds_restored") for r in records)
