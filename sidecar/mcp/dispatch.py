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
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..audit.log import AuditLog, request_record, trace_call, usage_record
from ..backends.http import idempotency_key
from ..execution.executor import CallLimits
from ..governance.gate import GovernedExecutor
from ..manifest import AgentBuild, Effect, ManagedTool
from ..model.client_approval import requested_approval
from ..model.conversation import ToolOutcome, refused
from ..observability import tracing
from ..observability.metrics import Metrics
from ..state.journal import has_side_effects
from ..tasks import ShieldedTasks
from .elicitation import ApprovalChannel, Elicitations, input_required
from .protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolParams,
    JsonRpcError,
    ListToolsParams,
    Message,
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

log = logging.getLogger(__name__)

ROUTE = "/mcp"
# The metric label of a call naming no tool of the agent: names clients choose never become
# label values.
UNKNOWN_TOOL_LABEL = "(unknown)"

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


# A method's handler: the request's ``result`` object; raises JsonRpcError to answer an error.
Handler = Callable[["McpDispatch", McpRequest], Awaitable[dict[str, Any]]]


class McpDispatch:
    def __init__(
        self,
        executor: GovernedExecutor,
        audit: AuditLog,
        metrics: Metrics,
        tasks: ShieldedTasks,
        pod: str = "",
    ) -> None:
        self._pod = pod  # part of every Idempotency-Key, as in mediated mode
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
    ) -> list[dict[str, Any]]:
        """A batch's answers (sent in a stream), in order. As in mediated mode (§4.2.9), its
        calls run at once only when every one is read-only; otherwise one by one, in order."""
        requests = [McpRequest(agent, version, m, True, approvals) for m in messages]
        if self._all_read_only(agent, messages):
            return list(await asyncio.gather(*map(self.answer, requests)))
        return [await self.answer(request) for request in requests]

    # -- handlers, shared by both eras -----------------------------------------------------------

    async def ping(self, request: McpRequest) -> dict[str, Any]:
        return {}

    async def list_tools(self, request: McpRequest) -> dict[str, Any]:
        return {"tools": self._listing(request)}

    async def call_tool(self, request: McpRequest) -> dict[str, Any]:
        params = parse_params(CallToolParams, request.message)
        return tool_result(await self._call(request, params), request.version)

    # -- handlers of the stateless era: every result says it is complete --------------------------

    async def ping_stateless(self, request: McpRequest) -> dict[str, Any]:
        # 2026-07-28 dropped ping, but clients of that era still send it (fastmcp's
        # Client.ping()); an empty result costs nothing and breaks none of them.
        return complete({})

    async def discover(self, request: McpRequest) -> dict[str, Any]:
        return discover_result(instructions(request.agent))

    async def list_tools_stateless(self, request: McpRequest) -> dict[str, Any]:
        return tools_list_result(self._listing(request))

    async def call_tool_stateless(self, request: McpRequest) -> dict[str, Any]:
        params = parse_params(CallToolParams, request.message)
        outcome = await self._call(request, params)
        asked = requested_approval(outcome)
        if asked is not None:  # the client retries with its user's answer (SPEC §16)
            tool = self._tools_of(request.agent)[1][params.name]
            return input_required(asked, tool, params.arguments or {})
        return complete(tool_result(outcome, request.version))

    # -- the tools -------------------------------------------------------------------------------

    def _listing(self, request: McpRequest) -> list[dict[str, Any]]:
        message = request.message
        if parse_params(ListToolsParams, message).cursor is not None:
            raise JsonRpcError(
                INVALID_PARAMS, "Invalid params: unknown cursor (the list has one page)"
            )
        # Tools whose definition drifted from their pin are not offered (§11.2).
        return self._tools_of(self._executor.quarantine.offered(request.agent))[2]

    def _tools_of(self, agent: AgentBuild) -> _AgentTools:
        key = (agent.agent.id, len(agent.tools.tools))
        cached = self._agent_tools.get(key)
        if cached is None or cached[0] is not agent:
            by_name = {tool.presented: tool for tool in agent.tools.tools}
            cached = (agent, by_name, tool_listing(agent))
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
        tool = self._tools_of(request.agent)[1].get(params.name)
        if tool is None:
            # Never executed: not a tool of THIS agent (another agent's, ungranted or made up).
            await self._audit_call(request, params, None, _unknown(params.name))
            raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        # The call and its audit record run as one task: a client that goes away does not
        # cancel a call already sent, and the record is still written.
        return await self._tasks.run(self._run(request, params, tool))

    async def _run(
        self, request: McpRequest, params: CallToolParams, tool: ManagedTool
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
                # Every call with side effects carries one (SPEC §8.2): this call's own, named
                # after its audit record, never repeated by another call with the same
                # JSON-RPC id.
                idempotency_key=idempotency_key(self._pod, agent.agent.id, checked, record_id)
                if has_side_effects(tool)
                else None,
            )
            outcome = await self.elicitations.run(
                lambda client: self._executor.execute(
                    agent.agent.id, checked, limits, client=client
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
}
STATELESS_ERA: dict[str, Handler] = {
    "ping": McpDispatch.ping_stateless,
    "server/discover": McpDispatch.discover,
    "tools/list": McpDispatch.list_tools_stateless,
    "tools/call": McpDispatch.call_tool_stateless,
}


def _unknown(name: str) -> ToolOutcome:
    return refused("unknown_tool", f"{name} is not a tool of this agent")
