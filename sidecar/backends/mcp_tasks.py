"""MCP services that answer a call with a task (SPEC §22; SEP-2663, the 2026-07-28 extension
``io.modelcontextprotocol/tasks``): the sidecar declares the extension on its calls, and a
service that decides to run one as a task answers ``resultType: "task"`` at once. The sidecar
then polls ``tasks/get`` until the task ends, and the call's timeout still bounds the whole
wait; a call given up (its timeout, the sidecar stopping) has ``tasks/cancel`` forwarded to the
service. Every answer is read under the call's result bound (``mcp_http.py``), polls
included, and is checked like any result.

The official client's extension interface carries it: a ``ResultClaim`` on ``tools/call`` whose
resolver drives the polls, so :mod:`.mcp`'s ``call_tool`` returns the task's final result. The
SDK is imported when the first MCP connection opens (:func:`backend_tasks`), as :mod:`.mcp`
imports it: a sidecar without MCP tools never pays for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from mcp.client.extension import ClientExtension

log = logging.getLogger(__name__)

EXTENSION = "io.modelcontextprotocol/tasks"
# The service's suggested interval, held to these bounds: a hostile one neither floods it
# with polls nor leaves a finished call unread for long.
MIN_POLL_S = 0.05
MAX_POLL_S = 2.0
CANCEL_TIMEOUT_S = 5.0
TERMINAL = frozenset({"completed", "failed", "cancelled"})


class BackendTaskFailed(Exception):
    """The service's task ended failed or cancelled: the call has no result."""


def backend_tasks() -> ClientExtension:
    """The extension an MCP backend connection is opened with."""
    return _extension_class()()


@functools.cache
def _extension_class() -> type[ClientExtension]:
    import mcp_types as types
    from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
    from mcp.client.session import ClientSession
    from pydantic import ConfigDict, Field

    class CreatedTask(types.Result):
        result_type: Literal["task"] = Field(alias="resultType")
        task_id: str = Field(max_length=256)
        status: str
        poll_interval_milliseconds: int | None = None

    class TaskState(types.Result):
        """A ``tasks/get`` answer, its fields as sent (``result``, ``error``, ...)."""

        model_config = ConfigDict(extra="allow")

    class TaskParams(types.RequestParams):
        task_id: str

    class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
        method: Literal["tasks/get"] = "tasks/get"
        name_param = "taskId"  # SEP-2663: Mcp-Name carries the task id

    class CancelTask(types.Request[TaskParams, Literal["tasks/cancel"]]):
        method: Literal["tasks/cancel"] = "tasks/cancel"
        name_param = "taskId"

    async def forward_cancel(session: ClientSession, task_id: str) -> None:
        """Tell the service its task is no longer wanted; its answer does not matter."""
        request = CancelTask(params=TaskParams(task_id=task_id))
        with contextlib.suppress(Exception):
            await asyncio.shield(
                asyncio.wait_for(session.send_request(request, TaskState), CANCEL_TIMEOUT_S)
            )

    class BackendTasks(ClientExtension):
        identifier = EXTENSION

        def claims(self) -> Sequence[ResultClaim[Any]]:
            return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

        async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
            session, task_id = ctx.session, created.task_id
            interval = created.poll_interval_milliseconds
            try:
                while True:
                    await asyncio.sleep(_poll_s(interval))
                    state = await session.send_request(
                        GetTask(params=TaskParams(task_id=task_id)), TaskState
                    )
                    fields = state.model_extra or {}
                    status = fields.get("status")
                    if status == "completed":
                        return types.CallToolResult.model_validate(fields.get("result") or {})
                    if status in TERMINAL:
                        raise BackendTaskFailed(_why(fields))
                    raw = fields.get("pollIntervalMilliseconds")
                    interval = raw if isinstance(raw, int) else interval
            except asyncio.CancelledError:
                await forward_cancel(session, task_id)
                raise

    return BackendTasks


def _poll_s(interval_ms: int | None) -> float:
    if interval_ms is None:
        return MIN_POLL_S * 4
    return min(MAX_POLL_S, max(MIN_POLL_S, interval_ms / 1000))


def _why(fields: dict[str, Any]) -> str:
    error = fields.get("error")
    message = error.get("message") if isinstance(error, dict) else fields.get("statusMessage")
    text = message if isinstance(message, str) else "no reason given"
    return f"the service's task ended {fields.get('status')}: {text[:500]}"
