"""10,000 tasks from one agent (SPEC §22): the sidecar keeps a bounded number of them, in
memory and on disk; the oldest are answered as expired, the newest still answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import mcp_types as types
import pytest
from mcp import MCPError

from clawpod.sidecar.mcp.tasks import DEFAULT_MAX_TASKS
from clawpod.sidecar.server.request.context import STATE_KEY
from tests.mcp.conftest import NativePod, mcp_client
from tests.mcp.test_tasks import list_tasks, poll, start_task

TASKS = 10_000
AT_ONCE = 50
DISK_BOUND = 32 * 1024 * 1024  # far above what 1,000 small tasks take, far below 10,000's


def disk_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


@pytest.mark.slow  # minutes on a shared machine: .ci/run's own phase
@pytest.mark.timeout(900)
async def test_ten_thousand_tasks_from_one_agent_stay_bounded(pod: NativePod) -> None:
    pod.service.reply("/items/box", json={"item": "box"})
    native = pod.sidecar.app[STATE_KEY].mcp.dispatch.native_tasks
    ids: list[str] = []
    async with mcp_client(pod.mcp_url, pod.tokens["trader"]) as client:
        for _ in range(TASKS // AT_ONCE):
            batch = [start_task(client, "desk_get_item", {"item": "box"}) for _ in range(AT_ONCE)]
            ids.extend(task.task_id for task in await asyncio.gather(*batch))
            assert native.kept("trader") <= DEFAULT_MAX_TASKS
        while native.running():
            await asyncio.sleep(0.05)
        with pytest.raises(MCPError) as expired:
            await poll(client, ids[0])
        assert expired.value.error.code == types.INVALID_PARAMS
        assert "expired" in expired.value.error.message
        assert (await poll(client, ids[-1])).status == "completed"
        page = await list_tasks(client)
        assert len(page.tasks) <= 50 and page.next_cursor is not None
    assert len(set(ids)) == TASKS
    assert native.kept("trader") <= DEFAULT_MAX_TASKS
    assert disk_bytes(pod.state_dir / "tasks") < DISK_BOUND
