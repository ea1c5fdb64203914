"""The example pod's own agent runner (compose/examples/trading-desk/agent/run.py) finishes a
native task through the sidecar's MCP endpoint, configured only by the compiler's mcp.json and
the agent's env file."""

from __future__ import annotations

import asyncio
import importlib.util
import io
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from clawpod.cli.audit import verify_command
from tests.mcp.test_native_runner import (
    EXAMPLE,
    SECRETS,
    agent_env,
    desk,
    model_calls,
    tool_call,
)
from tests.support.operator import approve_next
from tests.support.upstream import Reply, StubUpstream, openai_completion

__all__ = ["desk"]  # the fixture, re-used from the native end-to-end test


def load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_agent_run", EXAMPLE / "agent/run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def in_pod_config(build: Path, agent: str, sidecar_url: str, tmp: Path) -> Path:
    """The agent's mcp.json as mounted in its container, with the sidecar's test address."""
    text = (build / "context" / agent / "mcp.json").read_text()
    path = tmp / "mcp.json"
    path.write_text(text.replace("http://claw-sidecar:8080", sidecar_url))
    return path


async def test_the_example_runner_completes_a_native_task_over_mcp(
    desk: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream: StubUpstream = desk["upstream"]
    upstream.enqueue(
        "openai",
        model_calls(tool_call("c1", "trading-api_get_quote", {"symbol": "NVDA"})),
        model_calls(
            tool_call(
                "c2", "trading-api_execute_trade", {"symbol": "NVDA", "side": "buy", "quantity": 2}
            )
        ),
        Reply.json(openai_completion("Bought 2 NVDA.", model="gpt-4o-mini")),
    )
    sidecar_url = desk["sidecar"].url
    for key, value in agent_env(desk["build"], "trader", sidecar_url).items():
        monkeypatch.setenv(key, value)
    runner = load_runner()
    monkeypatch.setattr(runner, "CONTEXT", desk["build"] / "context" / "trader" / "CONTEXT.md")
    config = in_pod_config(desk["build"], "trader", sidecar_url, tmp_path)

    operator = desk["sidecar"].admin_url
    approval = asyncio.ensure_future(approve_next(operator, SECRETS["CLAW_OPERATOR_TOKEN"]))
    async with runner.AsyncOpenAI(max_retries=0) as llm:
        answer = await runner.native_loop(llm, "gpt-4o-mini", config)

    assert answer == "Bought 2 NVDA."
    assert (await approval)["arguments"] == {"symbol": "NVDA", "side": "buy", "quantity": 2}
    first = upstream.requests_to("openai")[0].json
    assert first["messages"][0]["role"] == "system"  # CONTEXT.md reached the model
    assert len(first["tools"]) == 7
    assert [(r["method"], r["path"]) for r in desk["trading_received"]] == [
        ("GET", "/api/v1/quotes/NVDA"),
        ("POST", "/api/v1/trades"),
    ]
    assert verify_command(desk["state"], io.StringIO()) == 0


async def test_a_failed_model_call_in_the_native_loop_is_one_line(
    desk: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A failed model call inside the MCP session ended in a 40-line traceback (an exception
    group around the SDK's error)."""
    upstream: StubUpstream = desk["upstream"]
    upstream.enqueue("openai", Reply.error("openai", 500, "the model server crashed"))
    sidecar_url = desk["sidecar"].url
    for key, value in agent_env(desk["build"], "trader", sidecar_url).items():
        monkeypatch.setenv(key, value)
    runner = load_runner()
    monkeypatch.setattr(
        runner, "MCP_CONFIG", in_pod_config(desk["build"], "trader", sidecar_url, tmp_path)
    )
    assert await runner.main() == 1
    err = capsys.readouterr().err  # the in-process sidecar logs there too: JSON lines
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if not line.startswith("{")]
    assert said == ["agent: the model request failed: HTTP 500: the model server crashed"]
