"""Claude Code (pinned in scripts/install-runners.sh), unchanged, through the sidecar."""

from __future__ import annotations

import pytest

from tests.mediation.conftest import TRADING_TOKEN
from tests.runners.conftest import RunnerPod, runner_binary

pytestmark = pytest.mark.runners
PROMPT = "What is AAPL at? Use the quote tool."
QUIET = {
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
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
