"""A sidecar killed while a task's call is with its service (SPEC §22, §8.2): after the
restart the task is there, failed with its outcome unknown, and the call was sent once."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from clawpod.sidecar.manifest import ToolPolicy
from tests.mcp.conftest import SERVICE_TOKEN, mcp_client, native_tools
from tests.mcp.test_tasks import poll, start_task
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS
from tests.support.sidecar_process import sidecar_process

ORDER = {"symbol": "NVDA", "side": "buy", "quantity": 1}


async def test_a_call_sent_before_a_crash_is_never_sent_again(
    tmp_path: Path, service: ToolService
) -> None:
    service.reply("/orders", json={"ok": True}, delay_s=3.0)
    agents = [
        AgentSpec(
            "trader",
            tools=native_tools(service.url),
            mode="native",
            policy=ToolPolicy(timeout_per_tool_ms=10000),
        )
    ]
    tokens = write_build(
        tmp_path / "build", agents, providers_for(openai_url="http://127.0.0.1:9/v1")
    )
    env = {**TEST_PROVIDER_KEYS, "SVC_TOKEN": SERVICE_TOKEN}
    state = tmp_path / "state"
    async with sidecar_process(tmp_path / "build", state, env) as running:
        async with mcp_client(running.url + "/mcp", tokens["trader"]) as client:
            task = await start_task(client, "desk_place_order", ORDER)
            while not service.requests:  # the call is with the service
                await asyncio.sleep(0.02)
        running.process.send_signal(signal.SIGKILL)
        await running.process.wait()
    async with (
        sidecar_process(tmp_path / "build", state, env) as running,
        mcp_client(running.url + "/mcp", tokens["trader"]) as client,
    ):
        after = await poll(client, task.task_id)
    assert after.status == "failed" and "outcome unknown" in (after.status_message or "")
    while service.completed < 1:  # the one call the service got ends
        await asyncio.sleep(0.05)
    assert [(r.method, r.path) for r in service.requests] == [("POST", "/orders")]
