"""MCP tasks on /mcp (SPEC §22) driven by the official TypeScript MCP SDK (its client's
``experimental.tasks``, @modelcontextprotocol/sdk pinned in scripts/install-runners.sh; the
SDK's 2.x client has no tasks API) against a real sidecar process: a long call polled to its
result, a call held for approval approved or denied while the SDK polls, a cancel, another
agent's task id refused, a restart in the middle, and a call its MCP service runs as a task of
its own, polled by the sidecar, and cancelled there when the SDK cancels
(tests/runners/mcp_tasks.mjs). The SDK is
told each task's end by ``notifications/tasks/status`` on its session's GET stream; another
agent's client never is."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from clawpod.cli.discover import fetch_descriptor
from tests.execution.test_governance import ENV, OPERATOR_TOKEN, POD, TRADE, compile_desk
from tests.mcp.test_backend_tasks import ENV as REPORTS_ENV
from tests.mcp.test_backend_tasks import task_tools
from tests.runners.conftest import RUNNER_TIMEOUT_S, RUNNERS_DIR, runner_binary
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.mcp_task_service import TaskService, running_task_service
from tests.support.services import ToolService
from tests.support.sidecar import TEST_AUDIT_KEY
from tests.support.sidecar_process import SidecarProcess, sidecar_process
from tests.support.upstream import StubUpstream

pytestmark = pytest.mark.runners
DRIVER = Path(__file__).with_name("mcp_tasks.mjs")
PREFIX = RUNNERS_DIR / "js-mcp-ts"
INVALID_PARAMS = -32602
# A second native agent, to ask for the trader's tasks.
AUDITOR = """\
  auditor:
    image: example/agent
    x-claw:
      agent: {{}}
      mode: native
      tools: [{{service: desk, allow: [get_quote], principal: desk-readonly}}]
"""


@dataclass
class TasksPod:
    sidecar: SidecarProcess
    service: ToolService
    tokens: dict[str, str]

    async def operator(self, method: str, path: str, **body: Any) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
        async with (
            aiohttp.ClientSession() as http,
            http.request(
                method, self.sidecar.admin_url + path, json=body or None, headers=headers
            ) as response,
        ):
            assert response.status == 200, await response.text()
            return await response.json()

    async def pending(self) -> dict[str, Any]:
        """The one pending approval, once the call has made it."""
        while True:
            body = await self.operator("GET", "/operator/approvals")
            pending = [a for a in body["approvals"] if a["status"] == "pending"]
            if pending:
                [approval] = pending
                return approval
            await asyncio.sleep(0.05)


@dataclass
class TsClient:
    """One run of the driver: what it printed, read as it goes."""

    process: asyncio.subprocess.Process
    seen: list[dict[str, Any]] = field(default_factory=list)

    async def until(self, event: str, **fields: Any) -> dict[str, Any]:
        """The first line of ``event`` whose fields include ``fields`` (read on as needed)."""
        for line in self.seen:
            if _matches(line, event, fields):
                return line
        assert self.process.stdout is not None
        while raw := await asyncio.wait_for(self.process.stdout.readline(), RUNNER_TIMEOUT_S):
            self.seen.append(json.loads(raw))
            if _matches(self.seen[-1], event, fields):
                return self.seen[-1]
        raise AssertionError(f"no {event} {fields} in {self.seen}")

    async def cue(self) -> None:
        """Tell the driver the moment has come (a cancel)."""
        assert self.process.stdin is not None
        self.process.stdin.write(b"now\n")
        await self.process.stdin.drain()
        self.process.stdin.close()

    async def finish(self) -> list[dict[str, Any]]:
        assert self.process.stdout is not None and self.process.stderr is not None
        if self.process.stdin is not None and not self.process.stdin.is_closing():
            self.process.stdin.close()
        out = await asyncio.wait_for(self.process.stdout.read(), RUNNER_TIMEOUT_S)
        self.seen += [json.loads(line) for line in out.splitlines()]
        err = await self.process.stderr.read()
        code = await self.process.wait()
        assert code == 0, err.decode()[-3000:]
        return self.seen

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.seen if line["event"] == name]


def _matches(line: dict[str, Any], event: str, fields: dict[str, Any]) -> bool:
    task = line.get("task") or {}
    return line["event"] == event and all(task.get(k) == v for k, v in fields.items())


def needs_sdk() -> None:
    if not (PREFIX / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        pytest.skip(f"the TypeScript MCP SDK is not in {PREFIX}: run scripts/install-runners.sh")


@pytest.fixture
async def pod(tmp_path: Path) -> AsyncIterator[TasksPod]:
    async with desk_pod(tmp_path) as (pod, _):
        yield pod


@asynccontextmanager
async def desk_pod(tmp_path: Path) -> AsyncIterator[tuple[TasksPod, Callable[[], Any]]]:
    """The desk's sidecar process, and how to restart it (on the same state)."""
    needs_sdk()
    async with ToolService() as service, StubUpstream() as upstream:
        build, tokens = compile_desk(
            tmp_path, service, upstream, pod_text=POD + AUDITOR, timeout_ms=60000
        )
        env = {**ENV, "CLAW_AUDIT_KEY": TEST_AUDIT_KEY}
        async with AsyncExitStack() as running:
            sidecar = await running.enter_async_context(
                sidecar_process(build, tmp_path / "state", env)
            )
            pod = TasksPod(sidecar, service, tokens)

            async def restart() -> None:
                await running.aclose()
                pod.sidecar = await running.enter_async_context(
                    sidecar_process(build, tmp_path / "state", env)
                )

            yield pod, restart


async def run_driver(pod: TasksPod | ReportsPod, agent: str, *argv: str) -> TsClient:
    node = runner_binary("node")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "MCP_PREFIX": str(PREFIX),
        "MCP_URL": pod.sidecar.url + "/mcp",
        "MCP_TOKEN": pod.tokens[agent],
    }
    process = await asyncio.create_subprocess_exec(
        str(node), str(DRIVER), *argv, env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    return TsClient(process)


def told(client: TsClient) -> list[tuple[str, str]]:
    """The (task id, status) of each status notification the SDK received."""
    return [(n["params"]["taskId"], n["params"]["status"]) for n in client.events("notification")]


def trade_calls(pod: TasksPod) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in pod.service.requests if r.path == "/trades"]


async def test_a_long_call_is_polled_by_the_sdk_to_its_result(pod: TasksPod) -> None:
    pod.service.reply("/quotes/SLOW", json={"price": 42}, delay_s=1.5)
    client = await run_driver(pod, "trader", "stream", "desk_get_quote", '{"symbol": "SLOW"}')
    seen = await client.finish()
    [connected] = client.events("connected")
    assert connected["capabilities"]["tasks"]["requests"]["tools"]["call"] == {}
    [created] = client.events("taskCreated")
    task_id = created["task"]["taskId"]
    assert created["task"]["status"] == "working"
    statuses = [line["task"]["status"] for line in client.events("taskStatus")]
    assert statuses[-1] == "completed"
    [result] = client.events("result")
    assert result["result"]["structuredContent"]["data"] == {"price": 42}
    assert result["result"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    [listed] = client.events("list")
    assert [t["taskId"] for t in listed["answer"]["tasks"]] == [task_id], seen
    assert [r.path for r in pod.service.requests] == ["/quotes/SLOW"]
    assert told(client) == [(task_id, "completed")]


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_an_approval_decided_while_the_sdk_polls(pod: TasksPod, decision: str) -> None:
    client = await run_driver(pod, "trader", "stream", "desk_execute_trade", json.dumps(TRADE))
    approval = await pod.pending()
    held = await client.until("taskStatus", status="working")
    assert approval["id"] in held["task"]["statusMessage"]
    assert trade_calls(pod) == []
    await pod.operator("POST", f"/operator/approvals/{approval['id']}", decision=decision)
    await client.finish()
    [result] = client.events("result")
    assert client.events("error") == []
    task_id = held["task"]["taskId"]
    assert told(client)[-1] == (task_id, "completed")
    if decision == "approve":
        assert result["result"]["isError"] is False
        assert trade_calls(pod) == [("POST", "/trades")]
    else:
        assert result["result"]["structuredContent"]["error"]["code"] == "approval_denied"
        assert trade_calls(pod) == []


async def test_a_task_cancelled_by_the_sdk_never_sends_its_call(pod: TasksPod) -> None:
    client = await run_driver(pod, "trader", "cancel", "desk_execute_trade", json.dumps(TRADE))
    approval = await pod.pending()
    await client.cue()
    await client.finish()
    [cancelled] = client.events("cancel")
    assert cancelled["answer"]["status"] == "cancelled"
    assert client.events("taskStatus")[-1]["task"]["status"] == "cancelled"
    [stream_end] = client.events("error")
    assert "cancelled" in stream_end["message"]
    # A cancelled task has no result, and cannot be cancelled again.
    [result] = client.events("result")
    assert result["refused"]["code"] == INVALID_PARAMS
    [again] = client.events("cancelAgain")
    assert again["refused"]["code"] == INVALID_PARAMS
    # Approved after the cancel: the call still never leaves.
    await pod.operator("POST", f"/operator/approvals/{approval['id']}", decision="approve")
    assert trade_calls(pod) == []


async def test_another_agents_task_id_is_refused_to_the_sdk(pod: TasksPod) -> None:
    pod.service.reply("/quotes/A", json={"price": 1})
    trader = await run_driver(pod, "trader", "stream", "desk_get_quote", '{"symbol": "A"}')
    await trader.finish()
    task_id = trader.events("taskCreated")[0]["task"]["taskId"]
    auditor = await run_driver(pod, "auditor", "foreign", task_id)
    await auditor.finish()
    assert told(auditor) == []
    for method in ("get", "result", "cancel"):
        [refused] = auditor.events(method)
        assert refused["refused"]["code"] == INVALID_PARAMS, refused
        assert "not found" in refused["refused"]["message"]
    [listed] = auditor.events("list")
    assert listed["answer"]["tasks"] == []
    assert trader.events("list")[0]["answer"]["tasks"][0]["status"] == "completed"


async def test_a_restart_in_the_middle_keeps_the_held_task_and_runs_its_call_once(
    tmp_path: Path,
) -> None:
    """The sidecar process stops while the task waits for its approval, and the SDK's client
    with it; after the restart, a new client polls the same task id: still held for the same
    approval, then approved, and the order is placed once."""
    async with desk_pod(tmp_path) as (pod, restart):
        first = await run_driver(pod, "trader", "stream", "desk_execute_trade", json.dumps(TRADE))
        approval = await pod.pending()
        task_id = (await first.until("taskCreated"))["task"]["taskId"]
        first.process.kill()
        await first.process.wait()
        await restart()
        client = await run_driver(pod, "trader", "await", task_id)
        held = await client.until("taskStatus", status="working")
        assert approval["id"] in held["task"]["statusMessage"]
        await pod.operator("POST", f"/operator/approvals/{approval['id']}", decision="approve")
        await client.finish()
    assert client.events("taskStatus")[-1]["task"]["status"] == "completed"
    [result] = client.events("result")
    assert result["answer"]["isError"] is False, result
    assert trade_calls(pod) == [("POST", "/trades")]


# -- an MCP service that runs the call as a task of its own (SEP-2663) ------------------------


@dataclass
class ReportsPod:
    sidecar: SidecarProcess
    service: TaskService
    tokens: dict[str, str]


@pytest.fixture
async def reports(tmp_path: Path) -> AsyncIterator[ReportsPod]:
    """The native agent with the reports service's tools, its slow ones long-running."""
    needs_sdk()
    async with running_task_service() as service:
        descriptor = await fetch_descriptor(service.url, None, {})
        agents = [AgentSpec("native", tools=task_tools(descriptor, service.url), mode="native")]
        providers = providers_for(openai_url="http://127.0.0.1:9/v1")
        tokens = write_build(tmp_path / "build", agents, providers)
        env = {**REPORTS_ENV, "CLAW_AUDIT_KEY": TEST_AUDIT_KEY}
        async with sidecar_process(tmp_path / "build", tmp_path / "state", env) as sidecar:
            yield ReportsPod(sidecar, service, tokens)


async def polled(service: TaskService) -> None:
    """Once the sidecar polls the service's task."""
    while not service.polls:
        await asyncio.sleep(0.02)


async def test_a_service_task_is_polled_by_the_sidecar_for_the_sdk(reports: ReportsPod) -> None:
    client = await run_driver(reports, "native", "stream", "desk_slow_report", '{"topic": "q3"}')
    await polled(reports.service)
    reports.service.release.set()
    await client.finish()
    [result] = client.events("result")
    assert result["result"]["structuredContent"]["data"] == {"topic": "q3", "pages": 12}
    task_id = client.events("taskCreated")[0]["task"]["taskId"]
    assert told(client)[-1] == (task_id, "completed")
    assert len(reports.service.tasks) == 1 and reports.service.runs == 1


async def test_the_sdks_cancel_reaches_the_services_task(reports: ReportsPod) -> None:
    """The call was sent, so it cannot be called back; but the service runs it as a task, and
    that task is cancelled when the SDK cancels its own."""
    client = await run_driver(reports, "native", "cancel", "desk_slow_report", '{"topic": "q4"}')
    await polled(reports.service)
    await client.cue()
    await client.finish()
    assert client.events("cancel")[0]["answer"]["status"] == "cancelled"
    while not reports.service.cancelled:  # told when the sidecar's poll wakes
        await asyncio.sleep(0.02)
    reports.service.release.set()  # a task not cancelled would now run to its end
    [service_task] = reports.service.tasks
    assert reports.service.cancelled == [service_task]
    assert reports.service.runs == 0
