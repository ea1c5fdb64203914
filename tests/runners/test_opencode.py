"""opencode (pinned in scripts/install-runners.sh), unchanged, through the sidecar as an
OpenAI-compatible provider (Chat Completions, streaming): its own retries after a provider
failure."""

from __future__ import annotations

import json

import pytest

from tests.runners.conftest import RUNNERS_DIR, RunnerPod, runner_binary
from tests.runners.provider import TRADE
from tests.runners.recording import RecordingProxy, recording, save
from tests.support.sidecar import audit_records

pytestmark = pytest.mark.runners
VERSION = "1.18.33"
MODEL = "gpt-4o-mini"


def opencode_config(base_url: str, token: str) -> dict[str, object]:
    """A custom provider in the project's opencode.json that is the sidecar."""
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "clawpod",
        "options": {"baseURL": base_url, "apiKey": token},
        "models": {MODEL: {"name": MODEL}},
    }
    return {"provider": {"clawpod": provider}, "model": f"clawpod/{MODEL}", "autoupdate": False}


@pytest.mark.plan(TRADE)
@pytest.mark.failures(1)
async def test_a_retry_after_the_order_places_it_once(runner_pod: RunnerPod) -> None:
    """The provider fails on the model call after the order (a 200 stream with an error
    event); opencode's own retry resumes the journaled order (its title request, offered no
    tools, places none: wave 3 found it placed a second)."""
    opencode = runner_binary("opencode", group="opencode")
    proxy = await RecordingProxy(runner_pod.sidecar.url).start()
    try:
        project = runner_pod.home / "project"
        project.mkdir()
        config = opencode_config(proxy.url + "/v1", runner_pod.tokens["mediated"])
        (project / "opencode.json").write_text(json.dumps(config))
        env = {"PATH": "/usr/bin:/bin", "HOME": str(runner_pod.home)}
        code, out, err = await runner_pod.run([str(opencode), "run", "Buy one AAPL."], env, project)
    finally:
        await proxy.close()
    if recording():
        meta = {"runner": "opencode", "version": VERSION, "api": "chat-completions"}
        paths = [str(runner_pod.home), str(RUNNERS_DIR)]
        save(f"opencode-{VERSION}-retry", meta, proxy.exchanges, paths)
    assert code == 0, (out + err)[-3000:]
    assert "TRADE-OK" in out
    assert len(runner_pod.orders()) == 1
    assert runner_pod.provider.failures == 0  # the provider did fail after the order
    records = audit_records(runner_pod.sidecar.state.state_dir, "mediated")
    assert any(r.get("resumed_from") for r in records)  # and the runner's retry resumed it
