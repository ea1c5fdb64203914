"""MCP tasks on ``/mcp`` (SPEC §22): a ``tools/call`` that returns a task at once and runs (or
waits for its approval) in the sidecar, polled by its client.

Both eras: the 2025-11-25 ``tasks`` capability (the client asks with ``params.task``; the
methods ``tasks/get``, ``tasks/result``, ``tasks/cancel``, ``tasks/list``) and the 2026-07-28
extension ``io.modelcontextprotocol/tasks`` (SEP-2663: the client declares the extension in the
request's capabilities and the server answers ``resultType: "task"``; ``tasks/get`` carries
the result inline, ``tasks/update`` answers ``input_required``, no list and no result method).

The call itself is the dispatcher's one governed call (:mod:`.dispatch`); this module keeps
what a task adds: its id and status, its journal records (:mod:`..state.task_journal`), the
bounds per agent (count, bytes, age) and each era's shapes. A task belongs to the agent whose
call made it: every lookup is by (agent, task id), so another agent's id is as unknown as a
made-up one.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from ..state.task_journal import TaskJournal
from ..tasks import ShieldedTasks
from .protocol import INTERNAL_ERROR

log = logging.getLogger(__name__)

Status = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
RELATED_TASK = "io.modelcontextprotocol/related-task"
ID_PREFIX = "tsk_"
MAX_ID_LENGTH = 64  # ours are 36 characters: anything longer is not one
POLL_INTERVAL_MS = 1000
PAGE_SIZE = 50
PRUNE_EVERY = 256  # tasks/list: one page, whatever the client asks

DEFAULT_MAX_TASKS = 1000
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_AGE_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class TaskLimits:
    """What one agent's tasks may hold: finished tasks go, oldest first, past any of these
    (and each at its age), and are then answered as expired."""

    max_tasks: int = DEFAULT_MAX_TASKS
    max_bytes: int = DEFAULT_MAX_BYTES
    max_age_s: float = DEFAULT_MAX_AGE_S


class TaskRefused(Exception):
    """A task could not be made (the agent's running tasks fill its quota, or the journal
    could not be written): nothing was run."""


@dataclass(slots=True)
class NativeTask:
    id: str
    agent: str
    version: str
    request_id: Any
    name: str
    arguments: dict[str, Any]
    created: float
    ttl_s: float
    updated: float = 0.0
    status: Status = "working"
    message: str | None = None
    input_requests: dict[str, Any] | None = None
    """2026-07-28: the questions the client answers with ``tasks/update``."""
    result: dict[str, Any] | None = None
    """The ``CallToolResult`` of a completed task."""
    error: dict[str, Any] | None = None
    """The JSON-RPC error of a failed task."""
    sent: bool = False
    """The call was cleared to leave: it is never sent again (§8.2)."""
    backend_task: str | None = None
    """The id of the task its MCP service runs the call as: what a restart polls."""
    abandoned: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when its client cancels it after its call was sent: the service's task, if the
    call is one, is cancelled too."""
    client_answers: bool = False
    """Its client answers a client approval itself (2026-07-28, ``tasks/update``): kept so a
    restart asks the same person, not the operator."""
    session_id: str | None = None
    """The MCP session whose call made it (2025-11-25): where its status changes are told.
    Not journaled: sessions end with the process."""
    size: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    answers: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    work: asyncio.Task[Any] | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def expires(self) -> float:
        return self.created + self.ttl_s


@dataclass(slots=True)
class TaskHooks:
    """What the governed call tells its task as it goes (:meth:`NativeTasks.hooks`)."""

    sending: Callable[[], Awaitable[None]]
    task_started: Callable[[str], Awaitable[None]]
    held: Callable[[str], None]
    ask: Callable[[str, dict[str, Any]], Awaitable[Any]] | None
    abandoned: asyncio.Event
    """Set when its client cancels the task after the call was sent."""


class NativeTasks:
    def __init__(
        self,
        journal: TaskJournal,
        shielded: ShieldedTasks,
        limits: TaskLimits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.journal = journal
        self.limits = limits or TaskLimits()
        self._shielded = shielded
        self._clock = clock
        self._by_agent: dict[str, OrderedDict[str, NativeTask]] = {}
        self._bytes: dict[str, int] = {}
        self.stopping = False
        self._forgotten = 0  # since the journal's segments were last pruned
        self.on_change: Callable[[NativeTask], None] | None = None
        """Told each change of a task's status (``notifications/tasks/status``)."""

    # -- counts (metrics, console) ----------------------------------------------------------

    def running(self) -> list[NativeTask]:
        return [t for tasks in self._by_agent.values() for t in tasks.values() if not t.terminal]

    def overview(self) -> list[dict[str, Any]]:
        """The tasks not finished, oldest first, as an operator reads them (no arguments)."""
        running = sorted(self.running(), key=lambda task: task.created)
        return [
            {
                "id": task.id,
                "agent": task.agent,
                "tool": task.name,
                "status": task.status,
                "message": task.message,
                "created": task.created,
                "sent": task.sent,
            }
            for task in running
        ]

    def kept(self, agent: str) -> int:
        return len(self._by_agent.get(agent, ()))

    # -- making and running -------------------------------------------------------------------

    async def create(
        self,
        agent: str,
        version: str,
        request_id: Any,
        name: str,
        arguments: dict[str, Any],
        ttl_ms: int | None = None,
        client_answers: bool = False,
        session_id: str | None = None,
    ) -> NativeTask:
        """A new task, durable before it is returned (a ``tasks/get`` of it resolves then)."""
        max_age = self.limits.max_age_s
        ttl_s = max_age if ttl_ms is None else min(max_age, max(1.0, ttl_ms / 1000))
        now = self._clock()
        task = NativeTask(
            id=ID_PREFIX + secrets.token_urlsafe(24),
            agent=agent,
            version=version,
            request_id=request_id,
            name=name,
            arguments=arguments,
            created=now,
            updated=now,
            ttl_s=ttl_s,
            client_answers=client_answers,
            session_id=session_id,
        )
        task.size = len(orjson.dumps(arguments))
        self._make_room(agent, task.size)
        try:
            await self.journal.write(agent, task.id, self._created_record(task))
            # Again: other tasks of the agent were made while this one's record was synced.
            self._make_room(agent, task.size)
        except (OSError, TaskRefused) as exc:
            self.journal.drop(agent, task.id)
            raise TaskRefused(f"the task could not be recorded: {exc}") from None
        self._admit(task)
        return task

    def start(self, task: NativeTask, work: Awaitable[dict[str, Any] | None]) -> None:
        """Run the task's call in the sidecar: ``work`` ends in its ``CallToolResult`` (None:
        the sidecar is stopping before the call was sent, the task stays for the restart)."""
        task.work = self._shielded.spawn(self._run(task, work))

    async def _run(self, task: NativeTask, work: Awaitable[dict[str, Any] | None]) -> None:
        try:
            result = await work
        except asyncio.CancelledError:
            return  # cancelled by its client before it was sent: already recorded
        except Exception:
            log.exception("task %s of agent %s failed", task.id, task.agent)
            await self._finish(task, "failed", error=_error("Internal error in the sidecar"))
            return
        if result is None or task.terminal:
            return  # kept for the restart, or cancelled while its call ran: result dropped
        await self._finish(task, "completed", result=result)

    def hooks(self, task: NativeTask, stateless: bool) -> TaskHooks:
        async def sending() -> None:
            if task.terminal:  # cancelled while it waited: it never leaves
                raise asyncio.CancelledError
            task.sent = True
            await self.journal.write(task.agent, task.id, {"sent": 1})

        async def task_started(backend_task: str) -> None:
            """Synced before the service's task is polled: a restart polls it again."""
            task.backend_task = backend_task
            try:
                await self.journal.write(task.agent, task.id, {"backend_task": backend_task})
            except OSError:
                log.exception("task %s: its service's task id was not journaled", task.id)

        def held(approval_id: str) -> None:
            message = f"waiting for approval {approval_id} by an operator"
            status: Status = "input_required" if stateless else "working"
            self._set(task, status, message, {} if stateless else None)

        async def ask(approval_id: str, question: dict[str, Any]) -> Any:
            message = f"waiting for approval {approval_id}: the user answers with tasks/update"
            request = {"method": "elicitation/create", "params": question}
            self._set(task, "input_required", message, {approval_id: request})
            try:
                while True:
                    responses = await task.answers.get()
                    if not responses:  # the sidecar is stopping: the restart asks again
                        return None
                    if approval_id in responses:
                        return responses[approval_id]
            finally:
                self._set(task, "working", None, None)

        asks = ask if stateless else None
        return TaskHooks(sending, task_started, held, asks, task.abandoned)

    def _set(
        self, task: NativeTask, status: Status, message: str | None, asks: dict | None
    ) -> None:
        if task.terminal:
            return
        task.status, task.message, task.input_requests = status, message, asks
        task.updated = self._clock()
        self._changed(task)

    def _changed(self, task: NativeTask) -> None:
        if self.on_change is not None:
            self.on_change(task)

    async def _finish(
        self,
        task: NativeTask,
        status: Status,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        message: str | None = None,
    ) -> None:
        task.status, task.result, task.error, task.message = status, result, error, message
        task.input_requests = None
        task.updated = self._clock()
        grown = len(orjson.dumps(result)) if result is not None else 0
        task.size += grown
        if task.agent in self._bytes:
            self._bytes[task.agent] += grown
        task.done.set()
        self._changed(task)
        record = {"finished": status, "result": result, "error": error, "message": message}
        try:
            await self.journal.write(task.agent, task.id, record)
        except OSError:
            # Answered from memory until a restart, which then reports the outcome unknown.
            log.exception("task %s of agent %s: its outcome was not journaled", task.id, task.agent)
        self._make_room(task.agent, 0)

    # -- the client's methods -----------------------------------------------------------------

    def get(self, agent: str, task_id: Any) -> NativeTask | None:
        """The agent's own task with this id, unexpired; None for anything else."""
        if not isinstance(task_id, str) or len(task_id) > MAX_ID_LENGTH:
            return None
        tasks = self._by_agent.get(agent)
        task = tasks.get(task_id) if tasks is not None else None
        if task is None:
            return None
        if task.terminal and self._clock() >= task.expires():
            self._forget(task)
            return None
        return task

    def page(self, agent: str, cursor: str | None) -> tuple[list[NativeTask], str | None]:
        """One page of the agent's tasks, oldest first, and the cursor of the next page; raises
        ValueError for a cursor this agent was not given."""
        self._expire(agent)
        tasks = list(self._by_agent.get(agent, {}).values())
        start = 0
        if cursor is not None:
            ids = [t.id for t in tasks]
            if not isinstance(cursor, str) or cursor not in ids:
                raise ValueError("unknown cursor")
            start = ids.index(cursor) + 1
        chunk = tasks[start : start + PAGE_SIZE]
        more = start + PAGE_SIZE < len(tasks)
        return chunk, (chunk[-1].id if more and chunk else None)

    async def cancel(self, task: NativeTask) -> None:
        """Cancel a task that has not finished. A call not yet sent never is; a call already
        with its service finishes there (it cannot be called back) and its result is dropped,
        unless the service runs it as a task of its own: that task is cancelled."""
        if task.terminal:
            return
        if not task.sent and task.work is not None:
            task.work.cancel()
        task.abandoned.set()
        await self._finish(task, "cancelled", message="cancelled by the client")

    async def fail(self, task: NativeTask, message: str) -> None:
        await self._finish(task, "failed", error=_error(message), message=message)

    def update(self, task: NativeTask, responses: Any) -> None:
        """The client's answers to the task's questions (2026-07-28); others are ignored."""
        if isinstance(responses, dict) and task.input_requests and task.answers.empty():
            # One answer waits at a time: a client repeating tasks/update queues nothing more.
            answered = {k: v for k, v in responses.items() if k in task.input_requests}
            if answered:
                task.answers.put_nowait(answered)

    # -- bounds -------------------------------------------------------------------------------

    def _admit(self, task: NativeTask) -> None:
        self._by_agent.setdefault(task.agent, OrderedDict())[task.id] = task
        self._bytes[task.agent] = self._bytes.get(task.agent, 0) + task.size

    def _make_room(self, agent: str, incoming: int) -> None:
        """Finished tasks go, oldest first, until one more (of ``incoming`` bytes) fits; raises
        TaskRefused when running tasks alone fill the agent's quota."""
        self._expire(agent)
        tasks = self._by_agent.get(agent)
        if not tasks:
            return
        limits = self.limits
        extra = 1 if incoming else 0
        while len(tasks) + extra > limits.max_tasks or (
            self._bytes.get(agent, 0) + incoming > limits.max_bytes
        ):
            oldest = next((t for t in tasks.values() if t.terminal), None)
            if oldest is None:
                if incoming:
                    raise TaskRefused(
                        f"the agent has {len(tasks)} tasks running: wait for some to finish"
                    )
                return
            self._forget(oldest)

    def _expire(self, agent: str) -> None:
        tasks = self._by_agent.get(agent)
        if not tasks:
            return
        now = self._clock()
        for task in [t for t in tasks.values() if t.terminal and now >= t.expires()]:
            self._forget(task)

    def _forget(self, task: NativeTask) -> None:
        tasks = self._by_agent.get(task.agent)
        if tasks is None or tasks.pop(task.id, None) is None:
            return
        self._bytes[task.agent] = max(0, self._bytes.get(task.agent, 0) - task.size)
        self.journal.drop(task.agent, task.id)
        self._forgotten += 1
        if self._forgotten >= PRUNE_EVERY:  # segments only forgotten tasks held go from disk
            self._forgotten = 0
            self._shielded.spawn(self.journal.prune())

    # -- restart ------------------------------------------------------------------------------

    async def recover(self) -> list[NativeTask]:
        """Bring back every kept task. A task whose call was sent and has no outcome failed
        with its outcome unknown: it is never sent again. The tasks returned were not sent
        (waiting for an approval when the sidecar stopped): the caller runs them again; or
        their call is a task at its MCP service: the caller polls that task for the outcome."""
        to_resume: list[NativeTask] = []
        for records in await self.journal.recover():
            task = _restored(records)
            if task is None:
                continue
            self._admit(task)
            if task.terminal:
                task.done.set()
            elif task.sent and task.backend_task is None:
                await self._finish(
                    task,
                    "failed",
                    error=_error(
                        "the sidecar restarted while this call ran: its outcome is unknown, "
                        "and it was not sent again"
                    ),
                    message="outcome unknown: the sidecar restarted while the call ran",
                )
            else:
                to_resume.append(task)
        for agent in list(self._by_agent):
            self._make_room(agent, 0)
        await self.journal.prune()
        return to_resume

    def stop(self) -> None:
        """The sidecar is stopping: tasks waiting for an approval stay as they are on disk, and
        those waiting for their client's answer stop waiting (the restart asks again)."""
        self.stopping = True
        for task in self.running():
            if task.input_requests:
                task.answers.put_nowait({})

    def close(self) -> None:
        self.journal.close()

    @staticmethod
    def _created_record(task: NativeTask) -> dict[str, Any]:
        return {
            "created": task.id,
            "agent": task.agent,
            "version": task.version,
            "request_id": task.request_id,
            "name": task.name,
            "arguments": task.arguments,
            "at": task.created,
            "ttl_s": task.ttl_s,
            "client_answers": task.client_answers,
        }


def _restored(records: list[dict[str, Any]]) -> NativeTask | None:
    first = records[0]
    if "created" not in first:
        return None
    try:
        task = NativeTask(
            id=str(first["created"]),
            agent=str(first["agent"]),
            version=str(first["version"]),
            request_id=first.get("request_id"),
            name=str(first["name"]),
            arguments=dict(first.get("arguments") or {}),
            created=float(first["at"]),
            ttl_s=float(first["ttl_s"]),
            client_answers=first.get("client_answers") is True,
        )
    except (KeyError, TypeError, ValueError):
        return None
    task.updated = task.created
    task.size = len(orjson.dumps(task.arguments))
    for record in records[1:]:
        if "sent" in record:
            task.sent = True
        backend_task = record.get("backend_task")
        if isinstance(backend_task, str):
            task.backend_task = backend_task
        finished = record.get("finished")
        if finished in TERMINAL:
            task.status = finished
            task.result = record.get("result")
            task.error = record.get("error")
            task.message = record.get("message")
            if task.result is not None:
                task.size += len(orjson.dumps(task.result))
    return task


def _error(message: str) -> dict[str, Any]:
    return {"code": INTERNAL_ERROR, "message": message}


# -- each era's shapes ---------------------------------------------------------------------


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def task_2025(task: NativeTask) -> dict[str, Any]:
    """A ``Task`` of 2025-11-25 (``ttl`` and ``pollInterval`` in milliseconds)."""
    shown: dict[str, Any] = {
        "taskId": task.id,
        "status": task.status,
        "createdAt": _iso(task.created),
        "lastUpdatedAt": _iso(task.updated),
        "ttl": round(task.ttl_s * 1000),
        "pollInterval": POLL_INTERVAL_MS,
    }
    if task.message is not None:
        shown["statusMessage"] = task.message
    return shown


def task_2026(task: NativeTask, *, detailed: bool) -> dict[str, Any]:
    """A ``Task`` of SEP-2663; ``detailed``: with its questions, result or error inline."""
    shown: dict[str, Any] = {
        "taskId": task.id,
        "status": task.status,
        "createdAt": _iso(task.created),
        "lastUpdatedAt": _iso(task.updated),
        "ttlSeconds": round(task.ttl_s),
        "pollIntervalMilliseconds": POLL_INTERVAL_MS,
    }
    if task.message is not None:
        shown["statusMessage"] = task.message
    if detailed:
        if task.status == "input_required":
            shown["inputRequests"] = task.input_requests or {}
        elif task.status == "completed":
            shown["result"] = task.result
        elif task.status == "failed":
            shown["error"] = task.error
    return shown


def related(task: NativeTask) -> dict[str, Any]:
    return {RELATED_TASK: {"taskId": task.id}}
