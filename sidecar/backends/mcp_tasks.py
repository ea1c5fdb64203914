"""MCP services that answer a call with a task (SPEC §22; SEP-2663, the 2026-07-28 extension
``io.modelcontextprotocol/tasks``): the sidecar declares the extension on its calls, and a
service that decides to run one as a task answers ``resultType: "task"`` at once. The sidecar
then polls ``tasks/get`` until the task ends, and the call's timeout still bounds the whole
wait; a call given up (its timeout, the sidecar stopping) has ``tasks/cancel`` forwarded to the
service, and so does a call whose caller gave up on it (a native task its client cancelled:
the call was sent and cannot be called back, but the service's task can). Every answer is read
under the call's result bound (``mcp_http.py``), polls included, and is checked like any result.

The official client's extension interface carries it: a ``ResultClaim`` on ``tools/call`` whose
resolver drives the polls, so :mod:`.mcp`'s ``call_tool`` returns the task's final result. The
resolver first tells the call's caller the task id (:data:`TASK_STARTED`, set around the call),
which journals it: after a restart the sidecar polls that task (:func:`poll_task`) instead of
sending the call again (§8.2). The
SDK is imported when the first MCP connection opens (:func:`backend_tasks`), as :mod:`.mcp`
imports it: a sidecar without MCP tools never pays for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import mcp_types as types
    from mcp.client.extension import ClientExtension
    from mcp.client.session import ClientSession

log = logging.getLogger(__name__)

EXTENSION = "io.modelcontextprotocol/tasks"
# The service's suggested interval, held to these bounds: a hostile one neither floods it
# with polls nor leaves a finished call unread for long.
MIN_POLL_S = 0.05
MAX_POLL_S = 2.0
CANCEL_TIMEOUT_S = 5.0
TERMINAL = frozenset({"completed", "failed", "cancelled"})


TASK_STARTED: contextvars.ContextVar[Callable[[str], Awaitable[None]] | None] = (
    contextvars.ContextVar("backend_task_started", default=None)
)
"""Set around one ``tools/call``: told the id of the task the service runs it as, before the
first poll (its caller journals it)."""

TASK_ABANDONED: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar(
    "backend_task_abandoned", default=None
)
"""Set around one ``tools/call``: set by its caller when it gives up on the call; the task the
service runs it as is then cancelled."""


class BackendTaskFailed(Exception):
    """The service's task ended failed or cancelled: the call has no result."""


class BackendTaskAbandoned(BackendTaskFailed):
    """The call's caller gave up on it: its task was cancelled at the service."""


async def poll_task(
    session: ClientSession, task_id: str, abandoned: asyncio.Event | None = None
) -> types.CallToolResult:
    """The final result of a task the service already runs (one a restart found journaled):
    polled as a fresh call's task is, never sent again."""
    return await _sdk().poll(session, task_id, None, abandoned)


class _Sdk:
    """What is built on the SDK's types, once: the extension and the poll loop it shares with
    :func:`poll_task`."""

    def __init__(
        self,
        extension: type[ClientExtension],
        poll: Callable[..., Awaitable[types.CallToolResult]],
    ) -> None:
        self.extension = extension
        self.poll = poll


def backend_tasks() -> ClientExtension:
    """The extension an MCP backend connection is opened with."""
    return _sdk().extension()


@functools.cache
def _sdk() -> _Sdk:
    import mcp_types as types
    from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
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
            started = TASK_STARTED.get()
            if started is not None:
                try:
                    await started(created.task_id)
                except BaseException:
                    await forward_cancel(ctx.session, created.task_id)
                    raise
            interval = created.poll_interval_milliseconds
            return await poll(ctx.session, created.task_id, interval, TASK_ABANDONED.get())

    async def poll(
        session: ClientSession,
        task_id: str,
        interval: int | None,
        abandoned: asyncio.Event | None = None,
    ) -> types.CallToolResult:
        """``tasks/get`` until the task ends; a wait given up, or ``abandoned`` by the call's
        caller, cancels it at the service."""
        try:
            while True:
                await _pause(_poll_s(interval), abandoned)
                if abandoned is not None and abandoned.is_set():
                    await forward_cancel(session, task_id)
                    raise BackendTaskAbandoned(
                        "its caller gave up on the call: the service's task was cancelled"
                    )
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

    return _Sdk(BackendTasks, poll)


async def _pause(seconds: float, abandoned: asyncio.Event | None) -> None:
    """Wait between two polls, or less if the caller gives up meanwhile."""
    if abandoned is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(abandoned.wait(), seconds)


def _poll_s(interval_ms: int | None) -> float:
    if interval_ms is None:
        return MIN_POLL_S * 4
    return min(MAX_POLL_S, max(MIN_POLL_S, interval_ms / 1000))


def _why(fields: dict[str, Any]) -> str:
    error = fields.get("error")
    message = error.get("message") if isinstance(error, dict) else fields.get("statusMessage")
    text = message if isinstance(message, str) else "no reason given"
    return f"the service's task ended {fields.get('status')}: {text[:500]}"
