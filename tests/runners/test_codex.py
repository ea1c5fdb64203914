"""Codex CLI (pinned in scripts/install-runners.sh), unchanged, through the sidecar's
Responses API."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawpod.compiler.output.runner_configs import codex_config
from tests.mediation.conftest import TRADING_TOKEN
from tests.runners.conftest import RunnerPod, runner_binary
from tests.runners.provider import TRADE
from tests.support.sidecar import audit_records

pytestmark = pytest.mark.runners
PROMPT = "What is AAPL at? Use the quote tool."


def provider_flags(base_url: str) -> list[str]:
    """Codex's documented way to name an OpenAI-compatible endpoint: a model provider whose
    key comes from OPENAI_API_KEY (the env file's agent token)."""
    provider = (
        f'{{name="clawpod", base_url="{base_url}", env_key="OPENAI_API_KEY", wire_api="responses"}}'
    )
    return ["-c", f"model_providers.clawpod={provider}", "-c", "model_provider=clawpod"]


def codex_exec(env: dict[str, str], prompt: str, *switches: str) -> list[str]:
    """``codex exec`` of ``prompt`` on the sidecar named in ``env``, with ``switches``."""
    return [
        str(runner_binary("codex")),
        "exec",
        "--skip-git-repo-check",
        *switches,
        *provider_flags(env["OPENAI_BASE_URL"]),
        "-m",
        "gpt-5-codex",
        prompt,
    ]


async def test_mediated_a_managed_tool(runner_pod: RunnerPod) -> None:
    env = runner_pod.env("mediated")
    argv = codex_exec(env, PROMPT)
    code, out, err = await runner_pod.run(argv, env)
    assert code == 0, (out + err)[-3000:]
    assert "QUOTE-OK /quotes/AAPL" in out
    (call,) = runner_pod.quote_calls()  # exactly one execution
    assert call.headers["Authorization"] == f"Bearer {TRADING_TOKEN}"


async def test_native_with_the_compiled_codex_config(runner_pod: RunnerPod, tmp_path: Path) -> None:
    token = runner_pod.tokens["native"]
    home = tmp_path / "codex-home"
    home.mkdir()
    # agents/<id>.codex.toml as the compiler writes it, with this sidecar's address.
    config = codex_config("native", runner_pod.sidecar.url + "/mcp", token)
    (home / "config.toml").write_text(config)
    env = runner_pod.env("native", CODEX_HOME=str(home))
    argv = codex_exec(env, PROMPT, "--dangerously-bypass-approvals-and-sandbox")
    code, out, err = await runner_pod.run(argv, env)
    assert code == 0, (out + err)[-3000:]
    assert "QUOTE-OK /quotes/AAPL" in out
    (call,) = runner_pod.quote_calls()  # exactly one execution, through MCP
    assert call.headers["Authorization"] == f"Bearer {TRADING_TOKEN}"


@pytest.mark.plan(TRADE)
@pytest.mark.failures(1)
async def test_mediated_a_retry_after_the_order_places_it_once(runner_pod: RunnerPod) -> None:
    """The provider fails on the model call after the order; Codex's own retries run and the
    trading service sees one order."""
    env = runner_pod.env("mediated")
    argv = codex_exec(env, "Buy one AAPL.")
    code, out, err = await runner_pod.run(argv, env)
    assert code == 0, (out + err)[-3000:]
    assert "TRADE-OK" in out
    assert len(runner_pod.orders()) == 1
    assert runner_pod.provider.failures == 0  # the provider did fail after the order
    records = audit_records(runner_pod.sidecar.state.state_dir, "mediated")
    assert any(r.get("resumed_from") for r in records)  # and the runner's retry resumed it
