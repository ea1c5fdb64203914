"""``/mcp``: MCP Streamable HTTP for native-mode agents (tools only).

POST carries JSON-RPC (``initialize``, ``notifications/initialized``, ``ping``, ``tools/list``,
``tools/call``); GET is answered 405 (this server never opens a stream of its own); DELETE ends
a session. Tool calls run through the same :class:`ToolExecutor` as mediated mode, with the
agent's policy limits, and each one is audited.

A ``tools/call`` answers as an SSE stream when the client accepts one: headers go out at once
and comment keep-alives flow while a slow tool runs, so proxies do not cut the exchange.
Everything else answers as plain JSON.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from typing import Any

import orjson
from aiohttp import web

from clawpod.sidecar.audit.log import AuditLog
from clawpod.sidecar.audit.records import request_record, usage_record
from clawpod.sidecar.audit.trace import trace_call
from clawpod.sidecar.backends.http_request import idempotency_key
from clawpod.sidecar.execution.runner import CallLimits
from clawpod.sidecar.governance.gate import GovernedExecutor
from clawpod.sidecar.manifest import (
    DEFAULT_ALLOWED_HOSTS,
    DEFAULT_MAX_BODY_BYTES,
    AgentBuild,
    Effect,
    ManagedTool,
)
from clawpod.sidecar.mcp.http import (
    JSON,
    SSE,
    HttpError,
    accepts,
    check_origin,
    hostname,
    json_response,
    jsonrpc_error,
    sse_event,
    write,
)
from clawpod.sidecar.mcp.protocol import (
    BATCHES_UNTIL,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    SUPPORTED_VERSIONS,
    CallToolParams,
    InitializeParams,
    JsonRpcError,
    ListToolsParams,
    Message,
    error_response,
    initialize_result,
    instructions,
    negotiate_version,
    parse_body,
    parse_params,
    result_response,
    tool_listing,
    tool_result,
)
from clawpod.sidecar.mcp.sessions import Session, SessionStore
from clawpod.sidecar.mcp.stateless import (
    ERROR_STATUS,
    STATELESS_VERSIONS,
    Rejected,
    check_request,
    complete,
    discover_result,
    is_stateless,
    tools_list_result,
)
from clawpod.sidecar.model.json_cost import costs_over
from clawpod.sidecar.model.outcome import ToolOutcome, refused
from clawpod.sidecar.observability import tracing
from clawpod.sidecar.observability.logs import log_request
from clawpod.sidecar.observability.metrics import Metrics
from clawpod.sidecar.request_body import read_body_once
from clawpod.sidecar.state.journal import has_side_effects
from clawpod.sidecar.tasks import ShieldedTasks
from clawpod.sidecar.transport.keepalive import with_keepalives

log = logging.getLogger("sidecar.mcp")

ROUTE = "/mcp"
SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
# The metric label of a call naming no tool of the agent: names clients choose never become
# label values.
UNKNOWN_TOOL_LABEL = "(unknown)"
# Without the header, the transport spec says to assume this revision.
DEFAULT_HEADER_VERSION = "2025-03-26"

# Per agent (and per set of tools offered), built once: the build it came from, presented name ->
# tool, the tools/list payload.
_AgentTools = tuple[AgentBuild, dict[str, ManagedTool], list[dict[str, Any]]]


class McpEndpoint:
    def __init__(
        self,
        executor: GovernedExecutor,
        audit: AuditLog,
        metrics: Metrics,
        keepalive_s: float,
        tasks: ShieldedTasks,
        allowed_hosts: Iterable[str] = DEFAULT_ALLOWED_HOSTS,
        pod: str = "",
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._pod = pod  # part of every Idempotency-Key, as in mediated mode
        self._max_body_bytes = max_body_bytes
        self._allowed_hosts = frozenset(filter(None, map(hostname, allowed_hosts)))
        self._executor = executor
        self._audit = audit
        self._metrics = metrics
        self.sessions = SessionStore()
        self.keepalive_s = keepalive_s
        self._agent_tools: dict[tuple[str, int], _AgentTools] = {}
        self._tasks = tasks

    async def handle(self, request: web.Request, agent: AgentBuild) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            check_origin(request, self._allowed_hosts)
            if agent.agent.mode != "native":
                raise HttpError(
                    403,
                    INVALID_REQUEST,
                    f"agent {agent.agent.id} is in mediated mode: the sidecar runs its tools; "
                    "/mcp serves native-mode agents",
                )
            if request.method == "POST":
                response = await self._post(request, agent)
            elif request.method == "DELETE":
                response = self._delete(request, agent)
            else:
                response = jsonrpc_error(
                    405,
                    INVALID_REQUEST,
                    "Method Not Allowed: use POST (and DELETE to end a session)",
                )
                response.headers["Allow"] = "POST, DELETE"
        except HttpError as err:
            response = err.response
        agent_id = agent.agent.id
        self._metrics.count_request(agent_id, ROUTE, response.status)
        log_request(
            agent=agent_id,
            route=ROUTE,
            method=request.method,
            status=response.status,
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return response

    # -- POST ------------------------------------------------------------------------------------

    async def _check_shape(self, raw: bytes) -> None:
        """A batch of many tiny messages is refused before it is parsed (issue 30), counted a
        slice per turn of the event loop."""
        for over in costs_over(raw, self._max_body_bytes):
            if over:
                raise HttpError(
                    413,
                    INVALID_REQUEST,
                    "Request Too Large: the body holds too many JSON items for its size",
                )
            await asyncio.sleep(0)

    async def _post(self, request: web.Request, agent: AgentBuild) -> web.StreamResponse:
        accepts_json, accepts_sse = accepts(request)
        if not (accepts_json or accepts_sse):
            raise HttpError(406, INVALID_REQUEST, f"Not Acceptable: accept {JSON} and {SSE}")
        if request.content_type != JSON:
            raise HttpError(415, INVALID_REQUEST, f"Unsupported Media Type: send {JSON}")
        raw = await read_body_once(request, self._max_body_bytes)
        if raw is None:
            raise HttpError(413, INVALID_REQUEST, "Request Too Large: the body is over the limit")
        await self._check_shape(raw)
        try:
            messages, batch = parse_body(raw)
        except JsonRpcError as err:
            raise HttpError(400, err.code, err.message) from None
        if is_stateless(request.headers.get(VERSION_HEADER), messages):
            return await self._post_stateless(request, agent, messages, batch, accepts_json)
        if any(m.method == "initialize" for m in messages):
            if batch:
                raise HttpError(
                    400, INVALID_REQUEST, "Invalid Request: initialize must not be batched"
                )
            return self._initialize(messages[0], agent, accepts_json)
        session = self._session_for(request, agent)
        if batch and session.protocol_version > BATCHES_UNTIL:
            raise HttpError(
                400,
                INVALID_REQUEST,
                f"Invalid Request: JSON-RPC batches are not part of MCP {session.protocol_version}",
            )
        # Notifications (initialized, cancelled) and responses need no action: calls already
        # sent complete anyway, and this server sends no requests of its own.
        requests = [m for m in messages if m.kind == "request"]
        if not requests:
            return web.Response(status=202)
        version = session.protocol_version
        calls = any(m.method == "tools/call" for m in requests)
        if accepts_sse and (calls or not accepts_json):
            return await self._answer_sse(request, agent, version, requests)
        answers = [await self._answer(agent, version, m, stream=False) for m in requests]
        return json_response(answers if batch else answers[0])

    async def _post_stateless(
        self,
        request: web.Request,
        agent: AgentBuild,
        messages: list[Message],
        batch: bool,
        accepts_json: bool,
    ) -> web.StreamResponse:
        """MCP 2026-07-28: one self-contained request per POST, no session."""
        if batch:
            raise HttpError(
                400,
                INVALID_REQUEST,
                "Invalid Request: JSON-RPC batches are not part of MCP 2026-07-28",
            )
        [message] = messages
        if message.kind != "request":
            return web.Response(status=202)  # this era defines no client notifications to act on
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers]
        try:
            version = check_request(message, headers)
        except Rejected as err:
            answer = error_response(message.id, err.code, err.message, err.data)
            return json_response(answer, status=err.status)
        if message.method == "tools/call" or not accepts_json:
            return await self._answer_sse(request, agent, version, [message])
        answer = await self._answer(agent, version, message, stream=False)
        status = ERROR_STATUS.get(answer["error"]["code"], 200) if "error" in answer else 200
        return json_response(answer, status=status)

    def _initialize(self, message: Message, agent: AgentBuild, accepts_json: bool) -> web.Response:
        if message.kind != "request":
            raise HttpError(
                400, INVALID_REQUEST, "Invalid Request: initialize must be a request with an id"
            )
        try:
            params = parse_params(InitializeParams, message)
        except JsonRpcError as err:
            return json_response(err.response(), status=400)
        version = negotiate_version(params.protocol_version)
        session = self.sessions.create(agent.agent.id, version)
        answer = result_response(message.id, initialize_result(version, agent))
        body = orjson.dumps(answer)
        if accepts_json:
            response = web.Response(body=body, content_type=JSON)
        else:
            response = web.Response(body=sse_event(body), content_type=SSE)
        response.headers[SESSION_HEADER] = session.id
        return response

    def _session_for(self, request: web.Request, agent: AgentBuild) -> Session:
        session_id = request.headers.get(SESSION_HEADER)
        if not session_id:
            raise HttpError(
                400,
                INVALID_REQUEST,
                f"Bad Request: missing {SESSION_HEADER} header; send initialize first",
            )
        session = self.sessions.get(session_id, agent.agent.id)
        if session is None:
            raise HttpError(
                404,
                INVALID_REQUEST,
                "Session not found: it ended or expired; initialize a new session",
            )
        header_version = request.headers.get(VERSION_HEADER, DEFAULT_HEADER_VERSION)
        if header_version not in SUPPORTED_VERSIONS:
            raise HttpError(
                400,
                INVALID_REQUEST,
                f"Bad Request: unsupported {VERSION_HEADER} {header_version!r}; "
                f"supported: {', '.join(SUPPORTED_VERSIONS)}",
            )
        return session

    async def _answer(
        self, agent: AgentBuild, version: str, message: Message, *, stream: bool
    ) -> dict[str, Any]:
        stateless = version in STATELESS_VERSIONS
        try:
            if message.method == "ping":
                # 2026-07-28 dropped ping, but clients of that era still send it (fastmcp's
                # Client.ping()); an empty result costs nothing and breaks none of them.
                return result_response(message.id, complete({}) if stateless else {})
            if message.method == "server/discover" and stateless:
                return result_response(message.id, discover_result(instructions(agent)))
            if message.method == "tools/list":
                if parse_params(ListToolsParams, message).cursor is not None:
                    raise JsonRpcError(
                        INVALID_PARAMS,
                        "Invalid params: unknown cursor (the list has one page)",
                        message.id,
                    )
                # Tools whose definition drifted from their pin are not offered (§11.2).
                tools = self._tools_of(self._executor.quarantine.offered(agent))[2]
                listing = tools_list_result(tools) if stateless else {"tools": tools}
                return result_response(message.id, listing)
            if message.method == "tools/call":
                params = parse_params(CallToolParams, message)
                outcome = await self._call(agent, message, params, stream=stream)
                result = tool_result(outcome, version)
                return result_response(message.id, complete(result) if stateless else result)
            raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {message.method}", message.id)
        except JsonRpcError as err:
            err.request_id = message.id
            return err.response()
        except Exception:
            # A bug must not leave an SSE stream without an answer or leak a traceback.
            log.exception("MCP %s failed for agent %s", message.method, agent.agent.id)
            return error_response(message.id, INTERNAL_ERROR, "Internal error in the sidecar")

    def _tools_of(self, agent: AgentBuild) -> _AgentTools:
        key = (agent.agent.id, len(agent.tools.tools))
        cached = self._agent_tools.get(key)
        if cached is None or cached[0] is not agent:
            by_name = {tool.presented: tool for tool in agent.tools.tools}
            cached = (agent, by_name, tool_listing(agent))
            self._agent_tools[key] = cached
        return cached

    # -- tools/call ------------------------------------------------------------------------------

    async def _call(
        self,
        agent: AgentBuild,
        message: Message,
        params: CallToolParams,
        *,
        stream: bool,
    ) -> ToolOutcome:
        tool = self._tools_of(agent)[1].get(params.name)
        if tool is None:
            # Never executed: not a tool of THIS agent (another agent's, ungranted or made up).
            await self._audit_call(agent, message, params, None, _unknown(params.name), stream)
            raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {params.name}", message.id)
        # The call and its audit record run as one task: a client that goes away does not
        # cancel a call already sent, and the record is still written.
        return await self._tasks.run(self._run(agent, message, params, tool, stream))

    async def _run(
        self,
        agent: AgentBuild,
        message: Message,
        params: CallToolParams,
        tool: ManagedTool,
        stream: bool,
    ) -> ToolOutcome:
        policy = agent.tools.policy
        record_id = "mcp_" + uuid.uuid4().hex
        checked = self._executor.check(tool, params.arguments, str(message.id))
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
            outcome = await self._executor.execute(agent.agent.id, checked, limits)
        await self._audit_call(agent, message, params, tool, outcome, stream, record_id)
        return outcome

    async def _audit_call(
        self,
        agent: AgentBuild,
        message: Message,
        params: CallToolParams,
        tool: ManagedTool | None,
        outcome: ToolOutcome,
        stream: bool,
        record_id: str | None = None,
    ) -> None:
        self._metrics.count_tool_call(tool.name if tool else UNKNOWN_TOOL_LABEL, outcome)
        call = trace_call(str(message.id), tool, params.name, params.arguments or {}, outcome)
        record_id = record_id or "mcp_" + uuid.uuid4().hex
        try:
            await self._audit.append(
                agent.agent.id,
                request_record(
                    record_id=record_id,
                    route=ROUTE,
                    mode="native",
                    http_status=200,
                    stream=stream,
                    error_code=outcome.error_code,
                    usage=usage_record(rounds=1),
                    tool_trace=[{"round": 1, "calls": [call]}],
                    trace_id=tracing.current_trace_id(),
                ),
            )
        except OSError:
            # The call has happened; its result still goes back. The operator must know.
            log.exception(
                "audit record %s of agent %s could not be written", record_id, agent.agent.id
            )

    # -- SSE -------------------------------------------------------------------------------------

    async def _answer_sse(
        self,
        request: web.Request,
        agent: AgentBuild,
        version: str,
        requests: list[Message],
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": SSE, "Cache-Control": "no-cache"})
        await response.prepare(request)
        connected = True

        async def keepalive(data: bytes) -> None:
            nonlocal connected
            connected = connected and await write(response, data)

        work = self._answer_all(agent, version, requests)
        answers = await with_keepalives(work, keepalive, self.keepalive_s)
        if connected:
            for answer in answers:
                if not await write(response, sse_event(orjson.dumps(answer))):
                    break
            else:
                await response.write_eof()
        return response

    async def _answer_all(
        self, agent: AgentBuild, version: str, requests: list[Message]
    ) -> list[dict[str, Any]]:
        """A batch's answers, in order. As in mediated mode (§4.2.9), its calls run at once
        only when every one is read-only; otherwise one by one, in the batch's order."""
        if self._all_read_only(agent, requests):
            return list(
                await asyncio.gather(
                    *(self._answer(agent, version, m, stream=True) for m in requests)
                )
            )
        return [await self._answer(agent, version, m, stream=True) for m in requests]

    def _all_read_only(self, agent: AgentBuild, requests: list[Message]) -> bool:
        by_name = self._tools_of(agent)[1]
        for message in requests:
            if message.method != "tools/call":
                continue
            name = message.params.get("name") if isinstance(message.params, dict) else None
            tool = by_name.get(name) if isinstance(name, str) else None
            if tool is None or tool.effect is not Effect.READ_ONLY:
                return False
        return True

    # -- DELETE ----------------------------------------------------------------------------------

    def _delete(self, request: web.Request, agent: AgentBuild) -> web.Response:
        session_id = request.headers.get(SESSION_HEADER)
        if not session_id:
            raise HttpError(400, INVALID_REQUEST, f"Bad Request: missing {SESSION_HEADER} header")
        if not self.sessions.terminate(session_id, agent.agent.id):
            raise HttpError(404, INVALID_REQUEST, "Session not found")
        return web.Response(status=204)


def _unknown(name: str) -> ToolOutcome:
    return refused("unknown_tool", f"{name} is not a tool of this agent")
