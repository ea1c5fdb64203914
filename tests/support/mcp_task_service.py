"""An MCP service that runs a tool as a task (SEP-2663), built with the official SDK's server
and its extension interface (``mcp.server.extension``): ``slow_report`` answers a client that
declares ``io.modelcontextprotocol/tasks`` with a task, finished when the test releases it;
``tasks/get`` and ``tasks/cancel`` are the extension's methods; ``slow_order``, with side
effects, is run as a task the same way; ``held_lookup``, a plain call,
also answers once released. It records what it was asked."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer

EXTENSION = "io.modelcontextprotocol/tasks"
TASKED = ("slow_report", "slow_order")  # the tools run as tasks for a client that can
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"


class TaskIdParams(types.RequestParams):
    task_id: str


@dataclass
class TaskService:
    url: str = ""
    release: asyncio.Event = field(default_factory=asyncio.Event)
    started: int = 0  # slow_report and slow_order bodies begun
    runs: int = 0  # ... and ran to their end
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    polls: int = 0
    cancelled: list[str] = field(default_factory=list)


def _now() -> str:
    return datetime.now(UTC).isoformat()


class ServerTasks(Extension):
    identifier = EXTENSION

    def __init__(self, service: TaskService) -> None:
        self.service = service

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel),
        ]

    async def intercept_tool_call(self, params: Any, ctx: Any, call_next: Any) -> Any:
        declared = ((ctx.meta or {}).get(CAPABILITIES) or {}).get("extensions") or {}
        if params.name not in TASKED or EXTENSION not in declared:
            return await call_next(ctx)
        task_id = secrets.token_hex(16)
        task: dict[str, Any] = {
            "taskId": task_id,
            "status": "working",
            "createdAt": _now(),
            "lastUpdatedAt": _now(),
            "ttlSeconds": 60,
            "pollIntervalMilliseconds": 50,
        }
        self.service.tasks[task_id] = task
        task["work"] = asyncio.ensure_future(self._run(task, dict(params.arguments or {})))
        return {"resultType": "task", **{k: v for k, v in task.items() if k != "work"}}

    async def _run(self, task: dict[str, Any], arguments: dict[str, Any]) -> None:
        subject = arguments.get("topic") or arguments.get("symbol", "")
        report = await slow_report_body(self.service, subject)
        task["status"] = "completed"
        task["result"] = {
            "content": [{"type": "text", "text": str(report)}],
            "structuredContent": report,
            "isError": False,
        }

    async def get(self, ctx: Any, params: TaskIdParams) -> dict[str, Any]:
        self.service.polls += 1
        task = self.service.tasks[params.task_id]
        return {k: v for k, v in task.items() if k != "work"}

    async def cancel(self, ctx: Any, params: TaskIdParams) -> dict[str, Any]:
        self.service.cancelled.append(params.task_id)
        task = self.service.tasks.get(params.task_id)
        if task is not None and task["status"] == "working":
            task["work"].cancel()
            task["status"] = "cancelled"
        return {}


async def slow_report_body(service: TaskService, topic: str) -> dict[str, Any]:
    service.started += 1
    await service.release.wait()
    service.runs += 1
    return {"topic": topic, "pages": 12}


@contextlib.asynccontextmanager
async def running_task_service() -> AsyncIterator[TaskService]:
    service = TaskService()
    server = MCPServer("reports-mcp", extensions=[ServerTasks(service)])

    @server.tool(
        description="A report that takes long.",
        annotations=types.ToolAnnotations(read_only_hint=True),
    )
    async def slow_report(topic: str) -> dict[str, Any]:
        return await slow_report_body(service, topic)

    @server.tool(
        description="An order that takes long (it has side effects).",
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
    )
    async def slow_order(symbol: str) -> dict[str, Any]:
        return await slow_report_body(service, symbol)

    @server.tool(
        description="A lookup that answers once the test releases it (never as a task).",
        annotations=types.ToolAnnotations(read_only_hint=True),
    )
    async def held_lookup(symbol: str) -> dict[str, Any]:
        await service.release.wait()
        return {"symbol": symbol}

    app = server.streamable_http_app(json_response=True)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.ensure_future(uv.serve(sockets=[sock]))
    while not uv.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    service.url = f"http://127.0.0.1:{port}/mcp"
    try:
        yield service
    finally:
        service.release.set()
        for entry in service.tasks.values():
            entry["work"].cancel()
        uv.should_exit = True
        await task
        sock.close()
