"""Codex CLI (pinned in scripts/install-runners.sh), unchanged, through the sidecar's
Responses API."""

from __future__ import annotations

import pytest

from tests.mediation.conftest import TRADING_TOKEN
from tests.runners.conftest import RunnerPod, runner_binary

pytestmark = pytest.mark.runners
PROMPT = "What is AAPL at? Use the quote tool."


def provider_flags(base_url: str) -> list[str]:
    """Codex's documented way to name an OpenAI-compatible endpoint: a model provider whose
    key comes from OPENAI_API_KEY (the env file's agent token)."""
    provider = (
        f'{{name="clawpod", base_url="{base_url}", env_key="OPENAI_API_KEY", wire_api="responses"}}'
    )
    return ["-c", f"model_providers.clawpod={provider}", "-c", "model_provider=clawpod"]


async def test_mediated_a_managed_tool(runner_pod: RunnerPod) -> None:
    codex = runner_binary("codex")
    env = runner_pod.env("mediated")
    argv = [
        str(codex),
        "exec",
        "--skip-git-repo-check",
        *provider_flags(env["OPENAI_BASE_URL"]),
        "-m",
        "gpt-5-codex",
        PROMPT,
    ]
    code, out, err = await runner_pod.run(argv, env)
    assert code == 0, (out + err)[-3000:]
    assert "QUOTE-OK /quotes/AAPL" in out
    (call,) = runner_pod.quote_calls()  # exactly one execution
    assert call.headers["Authorization"] == f"Bearer {TRADING_TOKEN}"
