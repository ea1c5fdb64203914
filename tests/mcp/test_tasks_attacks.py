"""An agent attacking its own /mcp tasks (SPEC §22): paging abuse of tasks/list, a flood of
tasks/update answers, result requests for what it may not read."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mcp import MCPError

from clawpod.sidecar.mcp.tasks import PAGE_SIZE, NativeTask, NativeTasks
from clawpod.sidecar.state.task_journal import TaskJournal
from clawpod.sidecar.tasks import ShieldedTasks
from tests.mcp.conftest import NativePod, mcp_client
from tests.mcp.test_tasks import list_tasks, poll_until, start_task, task_result


async def test_tasks_list_pages_are_bounded_and_chain_once(pod: NativePod) -> None:
    pod.service.reply("/items/box", json={"item": "box"})
    async with mcp_client(pod.mcp_url, pod.tokens["trader"]) as client:
        made = [
            (await start_task(client, "desk_get_item", {"item": "box"})).task_id
            for _ in range(PAGE_SIZE * 2 + 3)
        ]
        await poll_until(client, made[-1], "completed")
        seen: list[str] = []
        cursor = None
        while True:
            page = await list_tasks(client, cursor)
            assert len(page.tasks) <= PAGE_SIZE
            seen += [task.task_id for task in page.tasks]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == made  # every task once, oldest first: no loop, no gap
        # A cursor is a task id the agent was given: anything else is refused, not scanned.
        for forged in ["a" * 100_000, made[-1] + "'", "0"]:
            with pytest.raises(MCPError):
                await list_tasks(client, forged)


async def test_a_result_of_a_running_or_foreign_task_reads_nothing(pod: NativePod) -> None:
    pod.service.reply("/items/slow", json={"item": "slow"}, delay_s=1.0)
    async with (
        mcp_client(pod.mcp_url, pod.tokens["trader"]) as trader,
        mcp_client(pod.mcp_url, pod.tokens["auditor"]) as auditor,
    ):
        task = await start_task(trader, "desk_get_item", {"item": "slow"})
        # Many waits on one task from its agent all end with its one result.
        results = await asyncio.gather(*(task_result(trader, task.task_id) for _ in range(20)))
        assert {r.structured_content["data"]["item"] for r in results} == {"slow"}
        with pytest.raises(MCPError):
            await task_result(auditor, task.task_id)
    assert len(pod.service.requests) == 1


async def test_a_flood_of_answers_queues_one(tmp_path) -> None:
    """``tasks/update`` repeated while a question waits: one answer is kept, not thousands."""
    tasks = NativeTasks(TaskJournal(tmp_path, max_age_s=60), ShieldedTasks())
    task = NativeTask("tsk_x", "trader", "2026-07-28", 1, "desk_x", {}, 0.0, 60.0)
    task.status, task.input_requests = "input_required", {"apr_1": {}}
    for _ in range(10_000):
        tasks.update(task, {"apr_1": {"action": "accept"}, "other": {}})
    assert task.answers.qsize() == 1
    assert task.answers.get_nowait() == {"apr_1": {"action": "accept"}}
    tasks.close()


async def test_a_stopping_sidecar_releases_a_task_waiting_for_its_clients_answer(
    tmp_path: Path,
) -> None:
    """Shutdown does not wait out the approval's timeout for a client that never answers, and
    the restart asks the same client again (not the operator)."""
    tasks = NativeTasks(TaskJournal(tmp_path, max_age_s=60), ShieldedTasks())
    task = await tasks.create("trader", "2026-07-28", 1, "desk_x", {}, client_answers=True)
    waiting = asyncio.ensure_future(tasks.hooks(task, stateless=True).ask("apr_1", {}))
    while not task.input_requests:
        await asyncio.sleep(0)
    tasks.stop()
    assert await asyncio.wait_for(waiting, 10) is None
    tasks.close()
    again = NativeTasks(TaskJournal(tmp_path, max_age_s=60), ShieldedTasks())
    [unsent] = await again.recover()
    assert (unsent.id, unsent.client_answers) == (task.id, True)
    again.close()
