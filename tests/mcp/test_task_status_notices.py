"""``notifications/tasks/status`` (MCP 2025-11-25, SPEC §22): a session's GET stream is told
each change of the tasks its own calls made, received by the official MCP Python client
(through its extension interface's notification binding: its core tables leave the
notification out). Another agent's stream is never told, a stream is one per session, and what
waits for a client that does not read is bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from clawpod.sidecar.mcp.sessions import MAX_PENDING_NOTICES, Notices, Session
from tests.mcp.conftest import NativePod
from tests.mcp.test_tasks import poll_until, start_task

STATUS = "notifications/tasks/status"


class StatusWatch(ClientExtension):
    """Records every task status notification the client receives."""

    identifier = "dev.clawpod.tests/task-status"

    def __init__(self) -> None:
        self.seen: list[types.TaskStatusNotificationParams] = []

    def notifications(self) -> list[NotificationBinding[types.TaskStatusNotificationParams]]:
        async def record(params: types.TaskStatusNotificationParams) -> None:
            self.seen.append(params)

        return [
            NotificationBinding(
                method=STATUS, params_type=types.TaskStatusNotificationParams, handler=record
            )
        ]

    async def until(self, task_id: str, status: str) -> types.TaskStatusNotificationParams:
        while True:
            for params in self.seen:
                if params.task_id == task_id and params.status == status:
                    return params
            await asyncio.sleep(0.02)


@asynccontextmanager
async def watching(pod: NativePod, agent: str, watch: StatusWatch) -> AsyncIterator[Client]:
    """The official client of ``agent`` (2025-11-25), once its session's stream is open."""
    headers = {"Authorization": f"Bearer {pod.tokens[agent]}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(
            streamable_http_client(pod.mcp_url, http_client=http), mode="legacy", extensions=[watch]
        ) as client,
    ):
        await stream_open(pod, agent)
        yield client


async def stream_open(pod: NativePod, agent: str) -> Session:
    """The agent's session whose client holds its GET stream open (the client opens it on its
    own after the handshake: polled, so no status goes by before it)."""
    sessions = pod.sidecar.state.mcp.sessions
    while True:
        listening = [
            s for s in sessions._sessions.values() if s.agent_id == agent and s.notices.listening
        ]
        if listening:
            return listening[-1]
        await asyncio.sleep(0.02)


async def test_a_session_is_told_its_tasks_status_changes(pod: NativePod) -> None:
    pod.service.reply("/items/slow", json={"item": "slow"}, delay_s=0.5)
    watch = StatusWatch()
    async with watching(pod, "trader", watch) as client:
        task = await start_task(client, "desk_get_item", {"item": "slow"})
        completed = await watch.until(task.task_id, "completed")
        assert (await poll_until(client, task.task_id, "completed")).status == "completed"
    assert completed.created_at == task.created_at and completed.ttl == task.ttl
    assert completed.poll_interval is not None and completed.last_updated_at is not None
    assert {p.task_id for p in watch.seen} == {task.task_id}


async def test_another_agents_stream_is_never_told(pod: NativePod) -> None:
    pod.service.reply("/items/slow", json={"item": "slow"}, delay_s=0.3)
    trader_watch, auditor_watch = StatusWatch(), StatusWatch()
    async with (
        watching(pod, "auditor", auditor_watch),
        watching(pod, "trader", trader_watch) as trader,
    ):
        trader_session = await stream_open(pod, "trader")
        # The trader's session id, presented by the auditor: unknown to it, no stream.
        async with (
            aiohttp.ClientSession() as http,
            http.get(
                pod.mcp_url,
                headers={
                    "Authorization": f"Bearer {pod.tokens['auditor']}",
                    "Accept": "text/event-stream",
                    "Mcp-Session-Id": trader_session.id,
                    "MCP-Protocol-Version": "2025-11-25",
                },
            ) as response,
        ):
            assert response.status == 404
        task = await start_task(trader, "desk_get_item", {"item": "slow"})
        await trader_watch.until(task.task_id, "completed")
    assert auditor_watch.seen == []


async def test_one_stream_per_session(pod: NativePod) -> None:
    watch = StatusWatch()
    async with watching(pod, "trader", watch):
        session = await stream_open(pod, "trader")
        async with (
            aiohttp.ClientSession() as http,
            http.get(
                pod.mcp_url,
                headers={
                    "Authorization": f"Bearer {pod.tokens['trader']}",
                    "Accept": "text/event-stream",
                    "Mcp-Session-Id": session.id,
                    "MCP-Protocol-Version": "2025-11-25",
                },
            ) as response,
        ):
            assert response.status == 409


async def test_what_waits_for_a_stream_is_bounded() -> None:
    notices = Notices()
    notices.put("tsk_a", b"before the stream")  # nobody listens: nothing is kept
    notices.listening = True
    for n in range(10 * MAX_PENDING_NOTICES):
        notices.put(f"tsk_{n}", b"%d" % n)
    notices.put(f"tsk_{10 * MAX_PENDING_NOTICES - 1}", b"newest")  # replaces its task's older one
    taken = await notices.take(1.0)
    assert len(taken) == MAX_PENDING_NOTICES
    assert taken[-1] == b"newest" and taken[0] == b"%d" % (9 * MAX_PENDING_NOTICES)
    notices.close()
    assert await notices.take(1.0) == []
