"""The MCP tasks extension (SEP-2663, ``io.modelcontextprotocol/tasks``) on the official MCP
Python client, through the client's own extension interface (``ClientExtension`` with a
``ResultClaim`` for ``resultType: "task"``): the SDK ships the interface, not the extension.

A claimed task is resolved the way the SEP describes a client that keeps its ``call_tool``
contract: poll ``tasks/get`` (``Mcp-Name`` = the task id) until the task ends, answering its
``inputRequests`` with ``tasks/update`` through ``answer``. Every status seen is recorded, so
a test can watch the task go by.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from pydantic import ConfigDict, Field

EXTENSION = "io.modelcontextprotocol/tasks"
POLL_S = 0.05  # the test's own pace, far under the server's suggested interval

Answer = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any] | None]]
"""Given an input request's key and the request: the response, or None to leave it."""


class CreateTaskResult(types.Result):
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str
    status: str
    status_message: str | None = None
    ttl_seconds: int | None = None
    poll_interval_milliseconds: int | None = None


class AnyResult(types.Result):
    """A result kept as sent (its fields under their wire names)."""

    model_config = ConfigDict(extra="allow")


class TaskRequestParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any] | None = None


class GetTask(types.Request[TaskRequestParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTask(types.Request[TaskRequestParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTask(types.Request[TaskRequestParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class Tasks(ClientExtension):
    identifier = EXTENSION

    def __init__(self, answer: Answer | None = None) -> None:
        self.answer = answer
        self.created: list[CreateTaskResult] = []
        self.seen: list[dict[str, Any]] = []  # every tasks/get result, in order

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.resolve)]

    async def resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created)
        answered: set[str] = set()
        while True:
            task = await get_task(ctx.session, created.task_id)
            self.seen.append(task)
            status = task["status"]
            if status == "completed":
                return types.CallToolResult.model_validate(task["result"])
            if status in ("failed", "cancelled"):
                raise RuntimeError(
                    f"task {status}: {task.get('error') or task.get('statusMessage')}"
                )
            asks = task.get("inputRequests") or {}
            fresh = {k: v for k, v in asks.items() if k not in answered}
            if fresh and self.answer is not None:
                responses = {}
                for key, request in fresh.items():
                    response = await self.answer(key, request)
                    if response is not None:
                        responses[key] = response
                if responses:
                    answered.update(responses)
                    await update_task(ctx.session, created.task_id, responses)
            await asyncio.sleep(POLL_S)


async def get_task(session: ClientSession, task_id: str) -> dict[str, Any]:
    request = GetTask(params=TaskRequestParams(task_id=task_id))
    result = await session.send_request(request, AnyResult)
    return dict(result.model_extra or {})


async def update_task(session: ClientSession, task_id: str, responses: dict[str, Any]) -> None:
    request = UpdateTask(params=TaskRequestParams(task_id=task_id, input_responses=responses))
    await session.send_request(request, AnyResult)


async def cancel_task(session: ClientSession, task_id: str) -> None:
    await session.send_request(CancelTask(params=TaskRequestParams(task_id=task_id)), AnyResult)
