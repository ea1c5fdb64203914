"""An MCP service that answers a call with a task (SPEC §22, SEP-2663): the sidecar declares
the extension, polls the task to its result within the call's timeout, and forwards
``tasks/cancel`` when it gives up. The service is the official SDK's server with a tasks
extension built on its extension interface (``tests/support/mcp_task_service.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clawpod.cli.discover import fetch_descriptor
from clawpod.sidecar.manifest import ToolPolicy
from tests.mcp.conftest import mcp_client
from tests.mcp.test_backends import mcp_tools
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.mcp_task_service import TaskService, running_task_service
from tests.support.sidecar import TEST_PROVIDER_KEYS, RunningSidecar, start_sidecar

ENV = {**TEST_PROVIDER_KEYS, "DESK_TOKEN": "reports-service-token"}


@dataclass
class ReportsPod:
    service: TaskService
    sidecar: RunningSidecar
    tokens: dict[str, str]


@pytest.fixture
async def reports(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[ReportsPod]:
    timeout_ms = getattr(request, "param", 30000)
    async with running_task_service() as service:
        descriptor = await fetch_descriptor(service.url, None, {})
        tools = mcp_tools(descriptor, service.url)  # a bearer credential it ignores
        agents = [
            AgentSpec(
                "native",
                tools=tools,
                mode="native",
                policy=ToolPolicy(timeout_per_tool_ms=timeout_ms),
            )
        ]
        tokens = write_build(
            tmp_path / "build", agents, providers_for(openai_url="http://127.0.0.1:9/v1")
        )
        sidecar = await start_sidecar(tmp_path / "build", tmp_path / "state", env=ENV)
        try:
            yield ReportsPod(service, sidecar, tokens)
        finally:
            await sidecar.close()


async def test_a_backend_task_is_polled_to_its_result(reports: ReportsPod) -> None:
    async with mcp_client(reports.sidecar.url + "/mcp", reports.tokens["native"]) as client:
        call = asyncio.ensure_future(client.call_tool("desk_slow_report", {"topic": "q3"}))
        while not reports.service.polls and not call.done():  # the sidecar polls its task
            await asyncio.sleep(0.02)
        reports.service.release.set()
        result = await call
    assert result.is_error is False
    assert result.structured_content["data"] == {"topic": "q3", "pages": 12}
    assert len(reports.service.tasks) == 1 and reports.service.runs == 1


@pytest.mark.parametrize("reports", [1000], indirect=True)
async def test_a_backend_task_past_the_tool_timeout_is_cancelled_at_the_service(
    reports: ReportsPod,
) -> None:
    async with mcp_client(reports.sidecar.url + "/mcp", reports.tokens["native"]) as client:
        result = await client.call_tool("desk_slow_report", {"topic": "q4"})
    assert result.structured_content["error"]["code"] == "timeout"
    [task_id] = reports.service.tasks
    while not reports.service.cancelled:
        await asyncio.sleep(0.02)
    assert reports.service.cancelled == [task_id]
    assert reports.service.tasks[task_id]["status"] == "cancelled" and reports.service.runs == 0
