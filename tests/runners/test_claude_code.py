"""Claude Code (pinned in scripts/install-runners.sh), unchanged, through the sidecar."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawpod.compiler.output.runner_configs import mcp_config
from tests.mediation.conftest import TRADING_TOKEN
from tests.runners.conftest import RunnerPod, runner_binary
from tests.runners.provider import TRADE
from tests.support.sidecar import audit_records

pytestmark = pytest.mark.runners
PROMPT = "What is AAPL at? Use the quote tool."
QUIET = {
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    # MCP tools in the request itself, not deferred behind a tool search.
    "ENABLE_TOOL_SEARCH": "false",
}


async def test_mediated_a_managed_tool(runner_pod: RunnerPod) -> None:
    claude = runner_binary("claude")
    code, out, err = await runner_pod.run(
        [str(claude), "-p", PROMPT, "--model", "claude-sonnet-4-6"],
        runner_pod.env("mediated", **QUIET),
    )
    assert code == 0, err[-2000:]
    assert "QUOTE-OK /quotes/AAPL" in out
    (call,) = runner_pod.quote_calls()  # exactly one execution
    assert call.headers["Authorization"] == f"Bearer {TRADING_TOKEN}"


async def test_native_with_the_compiled_mcp_config(runner_pod: RunnerPod, tmp_path: Path) -> None:
    claude = runner_binary("claude")
    token = runner_pod.tokens["native"]
    # agents/<id>.mcp.json as the compiler writes it, with this sidecar's address.
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps(mcp_config(runner_pod.sidecar.url + "/mcp", token)))
    argv = [
        str(claude),
        "-p",
        PROMPT,
        "--model",
        "claude-sonnet-4-6",
        "--mcp-config",
        str(config),
        "--strict-mcp-config",
        "--allowedTools",
        "mcp__clawpod__desk_quote",
    ]
    code, out, err = await runner_pod.run(argv, runner_pod.env("native", **QUIET))
    assert code == 0, (out + err)[-3000:]
    assert "QUOTE-OK /quotes/AAPL" in out
    (call,) = runner_pod.quote_calls()  # exactly one execution, through MCP
    assert call.headers["Authorization"] == f"Bearer {TRADING_TOKEN}"


async def test_mediated_a_follow_up_turn_keeps_the_hidden_round(runner_pod: RunnerPod) -> None:
    claude = runner_binary("claude")
    env = runner_pod.env("mediated", **QUIET)
    base = [str(claude), "--model", "claude-sonnet-4-6", "-p"]
    code, out, err = await runner_pod.run([*base, PROMPT], env)
    assert code == 0, err[-2000:]
    code, out, err = await runner_pod.run([*base, "--continue", "And again?"], env)
    assert code == 0, err[-2000:]
    # The second turn's upstream call carries the first turn's hidden round, so the model
    # answers from it and nothing runs twice.
    assert "QUOTE-OK /quotes/AAPL" in out
    assert len(runner_pod.quote_calls()) == 1


@pytest.mark.plan(TRADE)
@pytest.mark.failures(1)
async def test_mediated_a_retry_after_the_order_places_it_once(runner_pod: RunnerPod) -> None:
    """The provider fails on the model call after the order: Claude Code's streamed attempt
    gets 200 and an in-stream error, and it retries with ``stream: false`` (the journal once
    keyed on ``stream``: 2 orders per prompt). The retry resumes the journaled order."""
    claude = runner_binary("claude")
    code, out, err = await runner_pod.run(
        [str(claude), "-p", "Buy one AAPL.", "--model", "claude-sonnet-4-6"],
        runner_pod.env("mediated", **QUIET),
    )
    assert code == 0, (out + err)[-2000:]
    assert "TRADE-OK" in out
    assert len(runner_pod.orders()) == 1
    assert runner_pod.provider.failures == 0  # the provider did fail after the order
    records = audit_records(runner_pod.sidecar.state.state_dir, "mediated")
    assert any(r.get("resumed_from") for r in records)  # and the runner's retry resumed it
