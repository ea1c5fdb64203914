"""MCP tasks belong to the agent whose call made them (SPEC §22): another agent's task id is
as unknown as a made-up one, in both eras, and its list holds only its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.mcp.conftest import NativePod, mcp_client
from tests.mcp.test_tasks import cancel, list_tasks, poll, poll_until, start_task, task_result
from tests.support.mcp_tasks_client import Tasks, cancel_task, get_task


async def test_another_agents_task_is_unknown_to_it(pod: NativePod) -> None:
    pod.service.reply("/items/box", json={"item": "box"})
    async with mcp_client(pod.mcp_url, pod.tokens["trader"]) as trader:
        task = await start_task(trader, "desk_get_item", {"item": "box"})
        await poll_until(trader, task.task_id, "completed")
        async with mcp_client(pod.mcp_url, pod.tokens["auditor"]) as auditor:
            for ask in (poll, task_result, cancel):
                with pytest.raises(MCPError) as refused:
                    await ask(auditor, task.task_id)
                assert refused.value.error.code == types.INVALID_PARAMS
                assert "not found" in refused.value.error.message
            assert (await list_tasks(auditor)).tasks == []
            with pytest.raises(MCPError):  # its cursor is not the auditor's either
                await list_tasks(auditor, task.task_id)
        assert (await poll(trader, task.task_id)).status == "completed"


async def test_another_agent_cannot_cancel_a_task_in_the_extension(pod: NativePod) -> None:
    pod.service.reply("/items/slow", json={"item": "slow"}, delay_s=1.0)
    tasks = Tasks()
    async with (
        extension_client(pod, "trader", tasks) as trader,
        mcp_client(pod.mcp_url, pod.tokens["auditor"], mode="auto") as auditor,
    ):
        call = asyncio.ensure_future(trader.call_tool("desk_get_item", {"item": "slow"}))
        while not tasks.created:
            await asyncio.sleep(0.02)
        task_id = tasks.created[0].task_id
        await cancel_task(auditor.session, task_id)  # acknowledged, as SEP-2663 says
        with pytest.raises(MCPError) as refused:
            await get_task(auditor.session, task_id)
        assert refused.value.error.code == types.INVALID_PARAMS
        result = await call
    assert result.is_error is False and tasks.seen[-1]["status"] == "completed"


@asynccontextmanager
async def extension_client(pod: NativePod, agent: str, tasks: Tasks) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {pod.tokens[agent]}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(
            streamable_http_client(pod.mcp_url, http_client=http), mode="auto", extensions=[tasks]
        ) as client,
    ):
        yield client
