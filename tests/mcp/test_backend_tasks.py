"""An MCP service that answers a call with a task (SPEC §22, SEP-2663): the sidecar declares
the extension, polls the task to its result within the call's timeout, and forwards
``tasks/cancel`` when it gives up. The service is the official SDK's server with a tasks
extension built on its extension interface (``tests/support/mcp_task_service.py``)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from openai import AsyncOpenAI

from clawpod.cli.discover import fetch_descriptor
from clawpod.sidecar.manifest import ManagedTool, ToolPolicy
from tests.mcp.conftest import mcp_client
from tests.mcp.test_backends import mcp_tools
from tests.mcp.test_tasks import cancel, poll, poll_until, start_task, task_result
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.mcp_task_service import TaskService, running_task_service
from tests.support.sidecar import TEST_PROVIDER_KEYS, RunningSidecar, audit_records, start_sidecar
from tests.support.sidecar_process import sidecar_process
from tests.support.upstream import Reply, StubUpstream, openai_completion

ENV = {**TEST_PROVIDER_KEYS, "DESK_TOKEN": "reports-service-token"}


def task_tools(
    descriptor: dict[str, Any], url: str, long_running: bool = True
) -> list[ManagedTool]:
    """The service's tools as the build has them, its slow ones marked long-running."""
    return [
        tool.model_copy(update={"long_running": (long_running and "slow" in tool.name) or None})
        for tool in mcp_tools(descriptor, url)
    ]


@dataclass
class ReportsPod:
    service: TaskService
    sidecar: RunningSidecar
    tokens: dict[str, str]


@pytest.fixture
async def reports(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[ReportsPod]:
    timeout_ms, long_running = getattr(request, "param", (30000, True))
    async with running_task_service() as service:
        descriptor = await fetch_descriptor(service.url, None, {})
        # A bearer credential it ignores.
        tools = task_tools(descriptor, service.url, long_running)
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


@pytest.mark.parametrize("reports", [(30000, False)], indirect=True)
async def test_a_tool_not_long_running_nor_advertised_is_called_without_tasks(
    reports: ReportsPod,
) -> None:
    """The tasks extension is declared only on the calls that may run as tasks (a long-running
    tool, or one the service lists with task support): any other call is a plain call."""
    async with mcp_client(reports.sidecar.url + "/mcp", reports.tokens["native"]) as client:
        call = asyncio.ensure_future(client.call_tool("desk_slow_report", {"topic": "q1"}))
        while not reports.service.started and not call.done():
            await asyncio.sleep(0.02)
        reports.service.release.set()
        result = await call
    assert result.structured_content["data"] == {"topic": "q1", "pages": 12}
    assert reports.service.tasks == {} and reports.service.runs == 1


@pytest.mark.parametrize("reports", [(1000, True)], indirect=True)
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


async def test_a_native_task_cancelled_by_its_client_cancels_the_services_task(
    reports: ReportsPod, tmp_path: Path
) -> None:
    """The call was sent, so it cannot be called back; but the service runs it as a task of its
    own, and that task is cancelled. The call's audit record says so."""
    async with mcp_client(reports.sidecar.url + "/mcp", reports.tokens["native"]) as client:
        task = await start_task(client, "desk_slow_report", {"topic": "q5"})
        while not reports.service.polls:  # the sidecar polls the service's task
            await asyncio.sleep(0.02)
        assert (await cancel(client, task.task_id)).status == "cancelled"
        while not reports.service.cancelled:
            await asyncio.sleep(0.02)
        reports.service.release.set()  # a task not cancelled would now run to its end
        assert (await poll(client, task.task_id)).status == "cancelled"
    [service_task] = reports.service.tasks
    assert reports.service.cancelled == [service_task] and reports.service.runs == 0
    while not (
        records := [r for r in audit_records(tmp_path / "state", "native") if r.get("tool_trace")]
    ):
        await asyncio.sleep(0.02)  # written when the call's outcome is known
    [call] = records[0]["tool_trace"][0]["calls"]
    assert call["executed"] is True and call["error_code"] == "cancelled"


def _round_of_calls(*calls: tuple[str, dict[str, Any]]) -> Reply:
    """An OpenAI reply asking for these tool calls in one round."""
    body = openai_completion("")
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
            }
            for n, (name, arguments) in enumerate(calls)
        ],
    }
    body["choices"][0]["finish_reason"] = "tool_calls"
    return Reply.json(body)


async def test_a_mixed_round_gives_only_the_long_running_call_the_tool_budget(
    tmp_path: Path,
) -> None:
    """``x-claw.long-running`` (§22) lengthens its own call's wait, not its round's: the other
    call of the round keeps its tool timeout."""
    async with running_task_service() as service, StubUpstream() as upstream:
        descriptor = await fetch_descriptor(service.url, None, {})
        tools = task_tools(descriptor, service.url)
        policy = ToolPolicy(timeout_per_tool_ms=1000, total_timeout_ms=60000)
        agents = [AgentSpec("mediated", tools=tools, mode="mediated", policy=policy)]
        providers = providers_for(openai_url=upstream.openai_url)
        tokens = write_build(tmp_path / "build", agents, providers)
        sidecar = await start_sidecar(tmp_path / "build", tmp_path / "state", env=ENV)
        try:
            both = _round_of_calls(
                ("desk_slow_report", {"topic": "q3"}), ("desk_held_lookup", {"symbol": "A"})
            )
            upstream.enqueue("openai", both)
            upstream.enqueue("openai", Reply.json(openai_completion("done")))
            client = AsyncOpenAI(base_url=sidecar.openai_base_url, api_key=tokens["mediated"])
            asked = asyncio.ensure_future(
                client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "report"}]
                )
            )
            # Each poll of the report's task waits at least 50 ms: 60 of them outlast the
            # lookup's 1 s timeout, whatever the machine's speed.
            while service.polls < 60 and not asked.done():
                await asyncio.sleep(0.02)
            service.release.set()
            answer = await asyncio.wait_for(asked, 60)
        finally:
            await sidecar.close()
    assert answer.choices[0].message.content == "done"
    results = [m for m in upstream.received[1].json["messages"] if m["role"] == "tool"]
    report, lookup = (orjson.loads(m["content"]) for m in results)
    assert report["ok"] is True and report["data"] == {"topic": "q3", "pages": 12}
    assert lookup["ok"] is False and lookup["error"]["code"] == "timeout"


async def test_a_backend_task_is_polled_again_after_a_crash_never_sent_again(
    tmp_path: Path,
) -> None:
    """A native task whose call its service runs as a task (§22), the sidecar killed while it
    polls: the restart polls the same service task to its result; the call went once (§8.2)."""
    async with running_task_service() as service:
        descriptor = await fetch_descriptor(service.url, None, {})
        policy = ToolPolicy(timeout_per_tool_ms=60000)
        tools = task_tools(descriptor, service.url)
        agents = [AgentSpec("native", tools=tools, mode="native", policy=policy)]
        tokens = write_build(
            tmp_path / "build", agents, providers_for(openai_url="http://127.0.0.1:9/v1")
        )
        state = tmp_path / "state"
        async with sidecar_process(tmp_path / "build", state, ENV) as running:
            async with mcp_client(running.url + "/mcp", tokens["native"]) as client:
                task = await start_task(client, "desk_slow_report", {"topic": "q3"})
                while not service.polls:  # its service task id is journaled before any poll
                    await asyncio.sleep(0.02)
            running.process.send_signal(signal.SIGKILL)
            await running.process.wait()
        polls_before = service.polls
        async with (
            sidecar_process(tmp_path / "build", state, ENV) as running,
            mcp_client(running.url + "/mcp", tokens["native"]) as client,
        ):
            # The restarted sidecar polls the same task (or has given up on it).
            while service.polls == polls_before:
                if (await poll(client, task.task_id)).status in ("completed", "failed"):
                    break
                await asyncio.sleep(0.02)
            service.release.set()
            after = await poll_until(client, task.task_id, "completed", "failed")
            result = await task_result(client, task.task_id)
    assert after.status == "completed"
    assert result.structured_content["data"] == {"topic": "q3", "pages": 12}
    assert len(service.tasks) == 1 and service.runs == 1


async def test_a_task_polled_again_after_a_crash_is_cancelled_at_the_service_by_its_client(
    tmp_path: Path,
) -> None:
    """The same, but the client cancels its task while the restarted sidecar polls the
    service's: that task is cancelled too, and never ran to its end."""
    async with running_task_service() as service:
        descriptor = await fetch_descriptor(service.url, None, {})
        agents = [AgentSpec("native", tools=task_tools(descriptor, service.url), mode="native")]
        tokens = write_build(
            tmp_path / "build", agents, providers_for(openai_url="http://127.0.0.1:9/v1")
        )
        state = tmp_path / "state"
        async with sidecar_process(tmp_path / "build", state, ENV) as running:
            async with mcp_client(running.url + "/mcp", tokens["native"]) as client:
                task = await start_task(client, "desk_slow_report", {"topic": "q6"})
                while not service.polls:
                    await asyncio.sleep(0.02)
            running.process.send_signal(signal.SIGKILL)
            await running.process.wait()
        polls_before = service.polls
        async with (
            sidecar_process(tmp_path / "build", state, ENV) as running,
            mcp_client(running.url + "/mcp", tokens["native"]) as client,
        ):
            while service.polls == polls_before:  # the restarted sidecar polls it again
                await asyncio.sleep(0.02)
            assert (await cancel(client, task.task_id)).status == "cancelled"
            while not service.cancelled:
                await asyncio.sleep(0.02)
            service.release.set()  # a task not cancelled would now run to its end
    [service_task] = service.tasks
    assert service.cancelled == [service_task] and service.runs == 0


async def test_a_mediated_retry_after_a_crash_polls_the_backend_task_it_sent(
    tmp_path: Path,
) -> None:
    """A mediated call with side effects its service runs as a task (§22), the sidecar killed
    while it polls: the runner's retry resumes the journal (§8.2), and the sidecar polls the
    same service task for the outcome instead of calling it unknown or sending it again."""
    async with running_task_service() as service, StubUpstream() as upstream:
        descriptor = await fetch_descriptor(service.url, None, {})
        policy = ToolPolicy(timeout_per_tool_ms=60000)
        tools = task_tools(descriptor, service.url)
        agents = [AgentSpec("mediated", tools=tools, mode="mediated", policy=policy)]
        providers = providers_for(openai_url=upstream.openai_url)
        tokens = write_build(tmp_path / "build", agents, providers)
        upstream.enqueue("openai", _round_of_calls(("desk_slow_order", {"symbol": "NVDA"})))
        upstream.enqueue("openai", Reply.json(openai_completion("ordered")))
        state = tmp_path / "state"
        messages: Any = [{"role": "user", "content": "buy NVDA"}]
        async with sidecar_process(tmp_path / "build", state, ENV) as running:
            client = AsyncOpenAI(
                base_url=running.url + "/v1", api_key=tokens["mediated"], max_retries=0
            )
            asked = asyncio.ensure_future(
                client.chat.completions.create(model="gpt-4o-mini", messages=messages)
            )
            while not service.polls:  # its service task id is journaled before any poll
                await asyncio.sleep(0.02)
            running.process.send_signal(signal.SIGKILL)
            await running.process.wait()
            with pytest.raises(Exception):  # noqa: B017 - the connection died with the sidecar
                await asked
        polls_before = service.polls
        async with sidecar_process(tmp_path / "build", state, ENV) as running:
            client = AsyncOpenAI(
                base_url=running.url + "/v1", api_key=tokens["mediated"], max_retries=0
            )
            retried = asyncio.ensure_future(
                client.chat.completions.create(model="gpt-4o-mini", messages=messages)
            )
            while service.polls == polls_before and not retried.done():
                await asyncio.sleep(0.02)
            service.release.set()
            answer = await asyncio.wait_for(retried, 60)
    assert answer.choices[0].message.content == "ordered"
    [result] = [m for m in upstream.received[-1].json["messages"] if m["role"] == "tool"]
    envelope = orjson.loads(result["content"])
    assert envelope["ok"] is True and envelope["data"] == {"topic": "NVDA", "pages": 12}
    assert len(service.tasks) == 1 and service.runs == 1
