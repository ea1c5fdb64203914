"""``/mcp`` dispatch: each JSON-RPC request to its method's handler, one small table per MCP era.

The session era (``initialize`` and ``Mcp-Session-Id``, up to 2025-11-25) and the stateless era
(2026-07-28, :mod:`clawpod.sidecar.mcp.stateless`) offer the same tools and run them the same
way; they differ in which methods exist and in how a result is shaped. Each era is therefore a
table, method -> handler, over shared steps (the tool listing, one tool call). How a request
arrived (session, SSE, batch) is the transport's business (:mod:`clawpod.sidecar.mcp.endpoint`).

Tool calls run through the same governed executor as mediated mode, with the agent's policy
limits, and each one is audited.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..audit.log import AuditLog, request_record, trace_call, usage_record
from ..backends.http import idempotency_key
from ..execution.executor import CallLimits
from ..governance.gate import GovernedExecutor
from ..manifest import AgentBuild, Effect, ManagedTool
from ..model.client_approval import requested_approval
from ..model.conversation import ToolOutcome, refused
from ..model.end_user import AuthKind, EndUser
from ..model.tool_search import SEARCH_TOOL
from ..observability import tracing
from ..observability.metrics import Metrics
from ..state.journal import has_side_effects
from ..tasks import ShieldedTasks
from .elicitation import ApprovalChannel, Elicitations, input_required
from .protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    TASKS_SINCE,
    CallToolParams,
    JsonRpcError,
    ListToolsParams,
    Message,
    TaskParams,
    error_response,
    instructions,
    parse_params,
    result_response,
    tool_listing,
    tool_result,
)
from .stateless import (
    STATELESS_VERSIONS,
    complete,
    discover_result,
    tools_list_result,
)
from .tasks import (
    NativeTask,
    NativeTasks,
    TaskHooks,
    TaskRefused,
    related,
    task_2025,
    task_2026,
)
from .tool_search import answer_search, offers_search, page, search_listing_entry

log = logging.getLogger(__name__)

ROUTE = "/mcp"
# The metric label of a call naming no tool of the agent: names clients choose never become
# label values.
UNKNOWN_TOOL_LABEL = "(unknown)"
TASK_SUPPORT = {"taskSupport": "optional"}

# Per agent (and per set of tools offered), built once: the build it came from, presented name ->
# tool, the tools/list payload.
_AgentTools = tuple[AgentBuild, dict[str, ManagedTool], list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class McpRequest:
    """One JSON-RPC request to answer: whose, in which protocol version, and whether its answer
    travels in an SSE stream (as the audit record says)."""

    agent: AgentBuild
    version: str
    message: Message
    stream: bool
    approvals: ApprovalChannel | None = None
    """How its client answers an approval, if it can (SPEC §16, ``mcp/elicitation.py``)."""
    end_user: EndUser | None = None
    """The verified end user the request is for (SPEC §21)."""
    tasks: bool = False
    """Its client takes a task for an answer (2026-07-28: the tasks extension, SEP-2663)."""
    auth: AuthKind | None = None
    """How the agent proved who it is, for a pod with ``identity`` (SPEC §21)."""
    session_id: str | None = None
    """The session it came in (2025-11-25): where its tasks' status changes are told."""


# A method's handler: the request's ``result`` object; raises JsonRpcError to answer an error.
Handler = Callable[["McpDispatch", McpRequest], Awaitable[dict[str, Any]]]


class McpDispatch:
    def __init__(
        self,
        executor: GovernedExecutor,
        audit: AuditLog,
        metrics: Metrics,
        tasks: ShieldedTasks,
        native_tasks: NativeTasks,
        agents: Mapping[str, AgentBuild],
        pod: str = "",
    ) -> None:
        self._pod = pod  # part of every Idempotency-Key, as in mediated mode
        self.native_tasks = native_tasks
        self._agents = agents  # whose tasks a restart resumes
        self._executor = executor
        self._audit = audit
        self._metrics = metrics
        self._tasks = tasks
        self._agent_tools: dict[tuple[str, int], _AgentTools] = {}
        self.elicitations = Elicitations()  # approvals asked of session clients (SPEC §16)

    async def answer(self, request: McpRequest) -> dict[str, Any]:
        """The JSON-RPC response to one request, never an exception."""
        message = request.message
        era = STATELESS_ERA if request.version in STATELESS_VERSIONS else SESSION_ERA
        try:
            handler = era.get(message.method or "")
            if handler is None:
                raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {message.method}")
            return result_response(message.id, await handler(self, request))
        except JsonRpcError as err:
            err.request_id = message.id
            return err.response()
        except Exception:
            # A bug must not leave an SSE stream without an answer or leak a traceback.
            log.exception("MCP %s failed for agent %s", message.method, request.agent.agent.id)
            return error_response(message.id, INTERNAL_ERROR, "Internal error in the sidecar")

    async def answer_all(
        self,
        agent: AgentBuild,
        version: str,
        messages: list[Message],
        approvals: ApprovalChannel | None = None,
        end_user: EndUser | None = None,
        tasks: bool = False,
        auth: AuthKind | None = None,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """A batch's answers (sent in a stream), in order. As in mediated mode (§4.2.9), its
        calls run at once only when every one is read-only; otherwise one by one, in order."""
        requests = [
            McpRequest(agent, version, m, True, approvals, end_user, tasks, auth, session_id)
            for m in messages
        ]
        if self._all_read_only(agent, messages):
            return list(await asyncio.gather(*map(self.answer, requests)))
        return [await self.answer(request) for request in requests]

    # -- handlers, shared by both eras -----------------------------------------------------------

    async def ping(self, request: McpRequest) -> dict[str, Any]:
        return {}

    async def list_tools(self, request: McpRequest) -> dict[str, Any]:
        tools, following = self._listing(request)
        if request.version >= TASKS_SINCE:  # each may be called as a task (SPEC §22)
            tools = [_with_task_support(tool) for tool in tools]
        return {"tools": tools, **({"nextCursor": following} if following else {})}

    async def call_tool(self, request: McpRequest) -> dict[str, Any]:
        params = parse_params(CallToolParams, request.message)
        asked = (params.model_extra or {}).get("task")
        if request.version >= TASKS_SINCE and isinstance(asked, dict):
            ttl = asked.get("ttl")
            ttl_ms = ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None
            return {"task": task_2025(await self._start_task(request, params, ttl_ms))}
        return tool_result(await self._call(request, params), request.version)

    # -- handlers of the stateless era: every result says it is complete --------------------------

    async def ping_stateless(self, request: McpRequest) -> dict[str, Any]:
        # 2026-07-28 dropped ping, but clients of that era still send it (fastmcp's
        # Client.ping()); an empty result costs nothing and breaks none of them.
        return complete({})

    async def discover(self, request: McpRequest) -> dict[str, Any]:
        return discover_result(instructions(request.agent))

    async def list_tools_stateless(self, request: McpRequest) -> dict[str, Any]:
        tools, following = self._listing(request)
        result = tools_list_result(tools)
        return {**result, "nextCursor": following} if following else result

    async def call_tool_stateless(self, request: McpRequest) -> dict[str, Any]:
        params = parse_params(CallToolParams, request.message)
        if request.tasks:  # the server decides (SEP-2663): every call of such a client
            task = await self._start_task(request, params, None)
            return {**task_2026(task, detailed=False), "resultType": "task"}
        outcome = await self._call(request, params)
        asked = requested_approval(outcome)
        if asked is not None:  # the client retries with its user's answer (SPEC §16)
            tool = self._tools_of(request.agent)[1][params.name]
            return input_required(asked, tool, params.arguments or {})
        return complete(tool_result(outcome, request.version))

    # -- tasks (SPEC §22): the 2025-11-25 methods, then SEP-2663's -----------------------------

    async def get_task(self, request: McpRequest) -> dict[str, Any]:
        return task_2025(self._task(request))

    async def task_result(self, request: McpRequest) -> dict[str, Any]:
        """Waits until the task ends (the endpoint streams keep-alives meanwhile)."""
        task = self._task(request)
        await task.done.wait()
        if task.status == "completed" and task.result is not None:
            return {**task.result, "_meta": related(task)}
        if task.status == "failed" and task.error is not None:
            raise JsonRpcError(task.error.get("code", INTERNAL_ERROR), task.error["message"])
        raise JsonRpcError(INVALID_PARAMS, f"Task {task.id} was cancelled: it has no result")

    async def cancel_task(self, request: McpRequest) -> dict[str, Any]:
        task = self._task(request)
        if task.terminal:
            raise JsonRpcError(INVALID_PARAMS, f"Cannot cancel task: it is already {task.status}")
        await self._cancel(request, task)
        return task_2025(task)

    async def list_tasks(self, request: McpRequest) -> dict[str, Any]:
        cursor = parse_params(ListToolsParams, request.message).cursor
        try:
            tasks, after = self.native_tasks.page(request.agent.agent.id, cursor)
        except ValueError:
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: unknown cursor") from None
        listing: dict[str, Any] = {"tasks": [task_2025(task) for task in tasks]}
        if after is not None:
            listing["nextCursor"] = after
        return listing

    async def get_task_stateless(self, request: McpRequest) -> dict[str, Any]:
        return complete(task_2026(self._task(request), detailed=True))

    async def update_task(self, request: McpRequest) -> dict[str, Any]:
        """Acknowledged whatever the id (SEP-2663); answers only the agent's own task."""
        task = self._task(request, strict=False)
        if task is not None:
            params = request.message.params if isinstance(request.message.params, dict) else {}
            self.native_tasks.update(task, params.get("inputResponses"))
        return complete({})

    async def cancel_task_stateless(self, request: McpRequest) -> dict[str, Any]:
        task = self._task(request, strict=False)
        if task is not None and not task.terminal:
            await self._cancel(request, task)
        return complete({})

    async def _cancel(self, request: McpRequest, task: NativeTask) -> None:
        """Cancel the agent's task. A call never sent is audited here: its run, cancelled
        before the call left, writes no record of its own."""
        unsent = not task.sent
        await self.native_tasks.cancel(task)
        self._metrics.tasks.labels(event="cancelled").inc()
        if unsent:
            params = CallToolParams(name=task.name, arguments=task.arguments)
            message = Message("request", task.request_id, "tools/call", params.model_dump())
            asked = dataclasses.replace(request, message=message)
            tool = self._tools_of(request.agent)[1].get(task.name)
            reason = f"task {task.id} was cancelled by its client before its call was sent"
            await self._audit_call(asked, params, tool, refused("cancelled", reason))

    def _task(self, request: McpRequest, *, strict: bool = True) -> Any:
        """The agent's own task the request names; another agent's is as unknown as a made-up
        id (the same answer, no oracle)."""
        task_id = parse_params(TaskParams, request.message).task_id
        task = self.native_tasks.get(request.agent.agent.id, task_id)
        if task is None and strict:
            raise JsonRpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found or expired")
        return task

    async def _start_task(
        self, request: McpRequest, params: CallToolParams, ttl_ms: int | None
    ) -> NativeTask:
        """Make the task (durable first), then run its call in the sidecar: the same governed
        call, approvals and audit record as any call."""
        tool = await self._tool(request, params)
        try:
            task = await self.native_tasks.create(
                request.agent.agent.id,
                request.version,
                request.message.id,
                params.name,
                params.arguments or {},
                ttl_ms,
                client_answers=request.approvals is not None,
                session_id=request.session_id,
            )
        except TaskRefused as exc:
            raise JsonRpcError(INTERNAL_ERROR, f"Task not created: {exc}") from None
        self._metrics.tasks.labels(event="created").inc()
        self._launch(task, request, params, tool)
        return task

    def _launch(
        self, task: NativeTask, request: McpRequest, params: CallToolParams, tool: ManagedTool
    ) -> None:
        stateless = request.version in STATELESS_VERSIONS
        hooks = self.native_tasks.hooks(task, stateless)
        # A 2026 client that can elicit answers a client approval with tasks/update; a 2025
        # task has no stream to be asked on: the operator decides.
        approvals = None
        if stateless and request.approvals is not None:
            approvals = ApprovalChannel(stateless=False, ask=hooks.ask)
        running = dataclasses.replace(request, approvals=approvals, tasks=False)
        self.native_tasks.start(task, self._task_work(running, params, tool, task, hooks))

    async def _task_work(
        self,
        request: McpRequest,
        params: CallToolParams,
        tool: ManagedTool,
        task: NativeTask,
        hooks: TaskHooks,
    ) -> dict[str, Any] | None:
        outcome = await self._run(request, params, tool, hooks)
        if self.native_tasks.stopping and not task.sent:
            return None  # its approval wait ended with the sidecar: the restart resumes it
        self._metrics.tasks.labels(event="finished").inc()
        return tool_result(outcome, request.version)

    def resume(self, tasks: list[NativeTask]) -> None:
        """Run again, after a restart, the tasks whose calls were never sent (they waited for
        an approval, which the approval store kept); poll, for those whose call is a task at
        its MCP service, that task (their call is never sent again, §8.2)."""
        for task in tasks:
            agent = self._agents.get(task.agent)
            tool = self._tools_of(agent)[1].get(task.name) if agent is not None else None
            if agent is None or tool is None:
                self._tasks.spawn(
                    self.native_tasks.fail(task, "its tool is no longer granted: not called")
                )
                continue
            params = CallToolParams(name=task.name, arguments=task.arguments)
            message = Message("request", task.request_id, "tools/call", params.model_dump())
            # A client that answered its approvals itself is asked again, not the operator.
            approvals = ApprovalChannel(stateless=True) if task.client_answers else None
            request = McpRequest(agent, task.version, message, False, approvals)
            if task.sent:
                self.native_tasks.start(task, self._polled(request, params, tool, task))
            else:
                self._launch(task, request, params, tool)

    async def _polled(
        self, request: McpRequest, params: CallToolParams, tool: ManagedTool, task: NativeTask
    ) -> dict[str, Any]:
        """The outcome of a task's call its MCP service runs as a task of its own, journaled
        before a restart: that task is polled within the tool's timeout, as the call was."""
        policy = request.agent.tools.policy
        checked = self._executor.check(tool, params.arguments, str(request.message.id))
        if isinstance(checked, ToolOutcome):  # its arguments no longer pass: not polled
            outcome = refused(
                "outcome_unknown", f"not polled after a restart: {checked.error_code}"
            )
        else:
            limits = CallLimits(
                timeout_s=policy.timeout_per_tool_ms / 1000,
                max_result_bytes=policy.max_tool_result_bytes,
                resumed_task=task.backend_task,
                abandoned=task.abandoned,
            )
            outcome = await self._executor.executor.execute(request.agent.agent.id, checked, limits)
        await self._audit_call(request, params, tool, outcome)
        self._metrics.tasks.labels(event="finished").inc()
        return tool_result(outcome, request.version)

    # -- the tools -------------------------------------------------------------------------------

    def _listing(self, request: McpRequest) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the agent's tools, and the cursor of the next (SPEC §23)."""
        cursor = parse_params(ListToolsParams, request.message).cursor
        # Tools whose definition drifted from their pin are not offered (§11.2).
        listing = self._tools_of(self._executor.quarantine.offered(request.agent))[2]
        try:
            return page(listing, cursor)
        except ValueError:
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: unknown cursor") from None

    def _tools_of(self, agent: AgentBuild) -> _AgentTools:
        key = (agent.agent.id, len(agent.tools.tools))
        cached = self._agent_tools.get(key)
        if cached is None or cached[0] is not agent:
            by_name = {tool.presented: tool for tool in agent.tools.tools}
            listing = tool_listing(agent)
            if offers_search(agent):  # a long list: the search leads it (SPEC §23)
                listing.insert(0, search_listing_entry())
            cached = (agent, by_name, listing)
            self._agent_tools[key] = cached
        return cached

    def _all_read_only(self, agent: AgentBuild, messages: list[Message]) -> bool:
        by_name = self._tools_of(agent)[1]
        for message in messages:
            if message.method != "tools/call":
                continue
            name = message.params.get("name") if isinstance(message.params, dict) else None
            tool = by_name.get(name) if isinstance(name, str) else None
            if tool is None or tool.effect is not Effect.READ_ONLY:
                return False
        return True

    # -- tools/call ------------------------------------------------------------------------------

    async def _call(self, request: McpRequest, params: CallToolParams) -> ToolOutcome:
        searched = await self._search(request, params)
        if searched is not None:
            return searched
        tool = await self._tool(request, params)
        # The call and its audit record run as one task: a client that goes away does not
        # cancel a call already sent, and the record is still written.
        return await self._tasks.run(self._run(request, params, tool))

    async def _tool(self, request: McpRequest, params: CallToolParams) -> ManagedTool:
        tool = self._tools_of(request.agent)[1].get(params.name)
        if tool is None:
            # Never executed: not a tool of THIS agent (another agent's, ungranted or made up).
            await self._audit_call(request, params, None, _unknown(params.name))
            raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        return tool

    async def _search(self, request: McpRequest, params: CallToolParams) -> ToolOutcome | None:
        """``claw_tool_search`` answered by the sidecar itself (SPEC §23), where it is offered
        and no granted tool has its name; None for every other call."""
        if params.name != SEARCH_TOOL or not offers_search(request.agent):
            return None
        if params.name in self._tools_of(request.agent)[1]:
            return None
        offered = self._executor.quarantine.offered(request.agent).tools.tools
        outcome = answer_search(offered, params.arguments)
        await self._audit_call(request, params, None, outcome)
        return outcome

    async def _run(
        self,
        request: McpRequest,
        params: CallToolParams,
        tool: ManagedTool,
        hooks: TaskHooks | None = None,
    ) -> ToolOutcome:
        agent = request.agent
        policy = agent.tools.policy
        record_id = "mcp_" + uuid.uuid4().hex
        checked = self._executor.check(tool, params.arguments, str(request.message.id))
        if isinstance(checked, ToolOutcome):
            outcome = checked
        else:
            limits = CallLimits(
                timeout_s=policy.timeout_per_tool_ms / 1000,
                max_result_bytes=policy.max_tool_result_bytes,
                task_started=hooks.task_started if hooks else None,
                abandoned=hooks.abandoned if hooks else None,
                # Every call with side effects carries one (SPEC §8.2): this call's own, named
                # after its audit record, never repeated by another call with the same
                # JSON-RPC id.
                idempotency_key=idempotency_key(self._pod, agent.agent.id, checked, record_id)
                if has_side_effects(tool)
                else None,
            )
            outcome = await self.elicitations.run(
                lambda client: self._executor.execute(
                    agent.agent.id,
                    checked,
                    limits,
                    client=client,
                    end_user=request.end_user,
                    before_send=hooks.sending if hooks else None,
                    on_hold=hooks.held if hooks else None,
                ),
                request.approvals,
                tool,
                params,
                self._executor.settings.timeout_ms / 1000,
            )
        await self._audit_call(request, params, tool, outcome, record_id)
        return outcome

    async def _audit_call(
        self,
        request: McpRequest,
        params: CallToolParams,
        tool: ManagedTool | None,
        outcome: ToolOutcome,
        record_id: str | None = None,
    ) -> None:
        agent_id = request.agent.agent.id
        self._metrics.count_tool_call(tool.name if tool else UNKNOWN_TOOL_LABEL, outcome)
        call_id = str(request.message.id)
        call = trace_call(call_id, tool, params.name, params.arguments or {}, outcome)
        record_id = record_id or "mcp_" + uuid.uuid4().hex
        try:
            await self._audit.append(
                agent_id,
                request_record(
                    record_id=record_id,
                    route=ROUTE,
                    mode="native",
                    http_status=200,
                    stream=request.stream,
                    error_code=outcome.error_code,
                    usage=usage_record(rounds=1),
                    tool_trace=[{"round": 1, "calls": [call]}],
                    trace_id=tracing.current_trace_id(),
                    end_user=request.end_user,
                    auth=request.auth,
                ),
            )
        except OSError:
            # The call has happened; its result still goes back. The operator must know.
            log.exception("audit record %s of agent %s could not be written", record_id, agent_id)


# Each era's methods. A method an era lacks is answered "Method not found".
SESSION_ERA: dict[str, Handler] = {
    "ping": McpDispatch.ping,
    "tools/list": McpDispatch.list_tools,
    "tools/call": McpDispatch.call_tool,
    "tasks/get": McpDispatch.get_task,
    "tasks/result": McpDispatch.task_result,
    "tasks/cancel": McpDispatch.cancel_task,
    "tasks/list": McpDispatch.list_tasks,
}
# SEP-2663: no tasks/result and no tasks/list ("Method not found").
STATELESS_ERA: dict[str, Handler] = {
    "ping": McpDispatch.ping_stateless,
    "server/discover": McpDispatch.discover,
    "tools/list": McpDispatch.list_tools_stateless,
    "tools/call": McpDispatch.call_tool_stateless,
    "tasks/get": McpDispatch.get_task_stateless,
    "tasks/update": McpDispatch.update_task,
    "tasks/cancel": McpDispatch.cancel_task_stateless,
}


def _unknown(name: str) -> ToolOutcome:
    return refused("unknown_tool", f"{name} is not a tool of this agent")


def _with_task_support(tool: dict[str, Any]) -> dict[str, Any]:
    """A listed tool marked as callable as a task (SPEC §22); the sidecar's own search answers
    at once and is never a task."""
    return tool if tool["name"] == SEARCH_TOOL else {**tool, "execution": TASK_SUPPORT}
