"""MCP tasks on /mcp (SPEC §22), driven by the official MCP Python client: the 2025-11-25
capability (``params.task``, ``tasks/get|result|cancel|list``) and the 2026-07-28 extension
(SEP-2663, through the client's extension interface: ``tests/support/mcp_tasks_client.py``).
A task's call is the one governed call: approvals hold it, the operator decides it, and the
tool service sees it once."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from clawpod.cli.clawc import main as clawc
from tests.execution.test_governance import OPERATOR_TOKEN, TRADE, Desk, desk
from tests.operators.console_client import ConsoleClient
from tests.support.mcp_tasks_client import Tasks, get_task
from tests.support.sidecar import audit_records

__all__ = ["desk"]  # the fixture

LEGACY_TTL_MS = 60000


@asynccontextmanager
async def trader(
    desk: Desk, mode: str = "legacy", tasks: Tasks | None = None
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {desk.tokens['trader']}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(
            streamable_http_client(desk.sidecar.url + "/mcp", http_client=http),
            mode=mode,
            extensions=[tasks] if tasks is not None else None,
        ) as client,
    ):
        yield client


async def start_task(client: Client, name: str, arguments: dict[str, Any]) -> types.Task:
    """A task-augmented ``tools/call``. The official client's 2.3.0 result tables leave the
    2025-11-25 tasks out on purpose (its ``tools/call`` result must be a ``CallToolResult``):
    this one request goes through its session's dispatcher unvalidated, then is read with the
    SDK's own ``CreateTaskResult``; every ``tasks/*`` request is the SDK's own."""
    params = types.CallToolRequestParams(
        name=name, arguments=arguments, task=types.TaskMetadata(ttl=LEGACY_TTL_MS)
    ).model_dump(by_alias=True, mode="json", exclude_none=True)
    raw = await client.session._dispatcher.send_raw_request("tools/call", params, {})
    return types.CreateTaskResult.model_validate(raw, by_name=False).task


async def poll(client: Client, task_id: str) -> types.GetTaskResult:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.GetTaskResult)


async def poll_until(client: Client, task_id: str, *statuses: str) -> types.GetTaskResult:
    while True:
        task = await poll(client, task_id)
        if task.status in statuses:
            return task
        await asyncio.sleep(0.02)


async def task_result(client: Client, task_id: str) -> types.CallToolResult:
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.CallToolResult)


async def cancel(client: Client, task_id: str) -> types.CancelTaskResult:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.CancelTaskResult)


async def list_tasks(client: Client, cursor: str | None = None) -> types.ListTasksResult:
    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
    return await client.session.send_request(
        types.ListTasksRequest(params=params), types.ListTasksResult
    )


# -- 2025-11-25 ------------------------------------------------------------------------------


async def test_the_session_era_advertises_tasks_for_tool_calls(desk: Desk) -> None:
    async with trader(desk) as client:
        capabilities = client.session.server_capabilities
        listing = await client.list_tools()
    assert capabilities is not None and capabilities.tasks is not None
    assert capabilities.tasks.requests.tools.call is not None
    assert capabilities.tasks.list is not None and capabilities.tasks.cancel is not None
    assert {tool.execution.task_support for tool in listing.tools} == {"optional"}


async def test_a_long_call_returns_a_task_at_once_and_its_result_later(desk: Desk) -> None:
    desk.service.reply("/quotes/SLOW", json={"price": 42}, delay_s=1.0)
    async with trader(desk) as client:
        task = await start_task(client, "desk_get_quote", {"symbol": "SLOW"})
        assert task.status == "working" and task.task_id.startswith("tsk_")
        assert task.ttl == LEGACY_TTL_MS
        done = await poll_until(client, task.task_id, "completed")
        result = await task_result(client, task.task_id)
        listed = await list_tasks(client)
    assert done.status == "completed"
    assert result.is_error is False and result.structured_content["data"] == {"price": 42}
    assert result.meta["io.modelcontextprotocol/related-task"] == {"taskId": task.task_id}
    assert [t.task_id for t in listed.tasks] == [task.task_id]
    assert [(r.method, r.path) for r in desk.service.requests] == [("GET", "/quotes/SLOW")]
    [record] = [r for r in audit_records(desk.state_dir, "trader") if r.get("tool_trace")]
    assert record["tool_trace"][0]["calls"][0]["name"] == "desk.get_quote"


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_a_call_held_for_approval_works_with_the_approval_named(
    desk: Desk, decision: str
) -> None:
    async with trader(desk) as client:
        task = await start_task(client, "desk_execute_trade", TRADE)
        [pending] = await desk.pending()
        held = await poll(client, task.task_id)
        assert held.status == "working" and pending["id"] in (held.status_message or "")
        assert desk.service.requests == []
        status, _ = await desk.operator(
            "POST", f"/operator/approvals/{pending['id']}", decision=decision
        )
        assert status == 200
        await poll_until(client, task.task_id, "completed")
        result = await task_result(client, task.task_id)
    if decision == "approve":
        assert result.is_error is False
        assert [(r.method, r.path) for r in desk.service.requests] == [("POST", "/trades")]
    else:
        assert result.structured_content["error"]["code"] == "approval_denied"
        assert desk.service.requests == []


async def test_a_cancelled_task_never_sends_its_call(desk: Desk) -> None:
    async with trader(desk) as client:
        task = await start_task(client, "desk_execute_trade", TRADE)
        [pending] = await desk.pending()
        cancelled = await cancel(client, task.task_id)
        assert cancelled.status == "cancelled"
        # Approved after the cancel: the call still never leaves.
        await desk.operator("POST", f"/operator/approvals/{pending['id']}", decision="approve")
        assert (await poll(client, task.task_id)).status == "cancelled"
        with pytest.raises(MCPError) as refused:
            await cancel(client, task.task_id)
        assert refused.value.error.code == types.INVALID_PARAMS
        with pytest.raises(MCPError):
            await task_result(client, task.task_id)
    assert desk.service.requests == []
    # The call never sent has its own audit record: what was asked, cancelled, not executed.
    [record] = [r for r in audit_records(desk.state_dir, "trader") if r.get("tool_trace")]
    [call] = record["tool_trace"][0]["calls"]
    assert record["mode"] == "native"
    assert call["name"] == "desk.execute_trade" and call["arguments"] == TRADE
    assert call["executed"] is False and call["error_code"] == "cancelled"


async def test_forged_ids_and_cursors_are_refused_alike(desk: Desk) -> None:
    desk.service.reply("/quotes/A", json={"price": 1})
    async with trader(desk) as client:
        task = await start_task(client, "desk_get_quote", {"symbol": "A"})
        for forged in ["tsk_" + "A" * 32, task.task_id + "x", "x" * 100_000, ""]:
            with pytest.raises(MCPError) as refused:
                await poll(client, forged)
            assert refused.value.error.code == types.INVALID_PARAMS
            assert "not found" in refused.value.error.message
        for cursor in ["nope", "tsk_" + "B" * 32]:
            with pytest.raises(MCPError) as refused:
                await list_tasks(client, cursor)
            assert refused.value.error.code == types.INVALID_PARAMS


# -- 2026-07-28 (SEP-2663) -------------------------------------------------------------------


async def test_the_stateless_era_answers_a_task_and_the_client_polls_it(desk: Desk) -> None:
    desk.service.reply("/quotes/SLOW", json={"price": 7}, delay_s=0.5)
    tasks = Tasks()
    async with trader(desk, "auto", tasks) as client:
        discovered = client.session.discover_result
        result = await client.call_tool("desk_get_quote", {"symbol": "SLOW"})
    assert discovered is not None
    assert "io.modelcontextprotocol/tasks" in (discovered.capabilities.extensions or {})
    assert result.is_error is False and result.structured_content["data"] == {"price": 7}
    [created] = tasks.created
    assert created.status == "working" and created.ttl_seconds
    assert tasks.seen[-1]["status"] == "completed"


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_an_operator_approval_is_input_required_with_its_id(
    desk: Desk, decision: str
) -> None:
    tasks = Tasks()
    async with trader(desk, "auto", tasks) as client:
        call = asyncio.ensure_future(client.call_tool("desk_execute_trade", TRADE))
        [pending] = await desk.pending()
        while not any(s["status"] == "input_required" for s in tasks.seen):
            await asyncio.sleep(0.02)
        held = next(s for s in tasks.seen if s["status"] == "input_required")
        assert pending["id"] in held["statusMessage"]
        assert desk.service.requests == []
        await desk.operator("POST", f"/operator/approvals/{pending['id']}", decision=decision)
        result = await call
    if decision == "approve":
        assert result.is_error is False
        assert [(r.method, r.path) for r in desk.service.requests] == [("POST", "/trades")]
    else:
        assert result.structured_content["error"]["code"] == "approval_denied"
        assert desk.service.requests == []


async def test_no_list_and_no_result_method_in_the_extension(desk: Desk) -> None:
    tasks = Tasks()
    async with trader(desk, "auto", tasks) as client:
        await client.call_tool("desk_get_quote", {"symbol": "A"})
        task_id = tasks.created[0].task_id
        assert (await get_task(client.session, task_id))["status"] == "completed"
        for request in (
            types.ListTasksRequest(params=types.PaginatedRequestParams()),
            types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)),
        ):
            with pytest.raises(MCPError) as refused:
                await client.session.send_request(request, types.Result)
            assert refused.value.error.code == types.METHOD_NOT_FOUND


# -- restarts --------------------------------------------------------------------------------


async def test_a_restart_keeps_a_task_waiting_for_its_approval(desk: Desk) -> None:
    async with trader(desk) as client:
        task = await start_task(client, "desk_execute_trade", TRADE)
        [pending] = await desk.pending()
    await desk.restart()
    async with trader(desk) as client:
        held = await poll(client, task.task_id)
        assert held.status == "working" and pending["id"] in (held.status_message or "")
        await desk.operator("POST", f"/operator/approvals/{pending['id']}", decision="approve")
        await poll_until(client, task.task_id, "completed")
        result = await task_result(client, task.task_id)
    assert result.is_error is False
    assert [(r.method, r.path) for r in desk.service.requests] == [("POST", "/trades")]


async def test_a_restart_keeps_finished_tasks_and_their_results(desk: Desk) -> None:
    desk.service.reply("/quotes/A", json={"price": 3})
    async with trader(desk) as client:
        task = await start_task(client, "desk_get_quote", {"symbol": "A"})
        await poll_until(client, task.task_id, "completed")
    await desk.restart()
    async with trader(desk) as client:
        result = await task_result(client, task.task_id)
    assert result.structured_content["data"] == {"price": 3}
    assert len(desk.service.requests) == 1


# -- operators -------------------------------------------------------------------------------


async def test_operators_see_running_tasks_in_clawc_the_console_and_metrics(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAW_OPERATOR_TOKEN", OPERATOR_TOKEN)
    async with trader(desk) as client:
        task = await start_task(client, "desk_execute_trade", TRADE)
        [pending] = await desk.pending()
        out, err = io.StringIO(), io.StringIO()
        code = await asyncio.to_thread(
            clawc, ["tasks", "--sidecar", desk.sidecar.admin_url], out, err
        )
        assert code == 0, err.getvalue()
        [row] = out.getvalue().splitlines()
        assert task.task_id in row and "working" in row and "desk_execute_trade" in row
        assert pending["id"] in row and "not sent" in row
        async with ConsoleClient(desk.sidecar.admin_url) as console:
            await console.sign_in(OPERATOR_TOKEN)
            status, page, _ = await console.get("/console/health")
        assert status == 200 and task.task_id in page
        async with (
            aiohttp.ClientSession() as http,
            http.get(desk.sidecar.admin_url + "/metrics") as response,
        ):
            metrics = await response.text()
        assert "claw_mcp_tasks_running 1.0" in metrics
        assert 'claw_mcp_tasks_total{event="created"} 1.0' in metrics
        await cancel(client, task.task_id)
    code = await asyncio.to_thread(clawc, ["tasks", "--sidecar", desk.sidecar.admin_url], out, err)
    assert out.getvalue().endswith("no running tasks\n")
