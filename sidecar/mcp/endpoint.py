"""``/mcp``: the transport of MCP Streamable HTTP for native-mode agents (tools only).

POST carries JSON-RPC (``initialize``, ``notifications/initialized``, then the requests
:mod:`clawpod.sidecar.mcp.dispatch` answers); GET opens a session's own stream, which carries
``notifications/tasks/status`` for the tasks that session's calls made (2025-11-25 on; 405
otherwise); DELETE ends a session. This module owns what HTTP decides: Origin and Host,
Accept and Content-Type, the body's bounds, which era a POST belongs to, the session handshake
and its header, batches, and the answer's framing.

A ``tools/call`` answers as an SSE stream when the client accepts one: headers go out at once
and comment keep-alives flow while a slow tool runs, so proxies do not cut the exchange.
Everything else answers as plain JSON.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from aiohttp import web

from ..audit.log import AuditLog
from ..governance.gate import GovernedExecutor
from ..manifest import (
    DEFAULT_ALLOWED_HOSTS,
    DEFAULT_MAX_BODY_BYTES,
    AgentBuild,
)
from ..model.end_user import AuthKind, Caller, EndUser
from ..model.json_cost import costs_over
from ..observability.logs import log_request
from ..observability.metrics import Metrics
from ..request_body import read_body_once
from ..tasks import ShieldedTasks
from ..transport.keepalive import KEEPALIVE, with_keepalives
from .dispatch import ROUTE, McpDispatch, McpRequest
from .elicitation import ApprovalChannel, can_elicit
from .http import (
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
from .protocol import (
    BATCHES_UNTIL,
    INVALID_REQUEST,
    SUPPORTED_VERSIONS,
    TASKS_SINCE,
    InitializeParams,
    JsonRpcError,
    Message,
    error_response,
    initialize_result,
    negotiate_version,
    parse_body,
    parse_params,
    result_response,
)
from .sessions import Session, SessionStore
from .stateless import (
    CAPABILITIES_META_KEY,
    ERROR_STATUS,
    Rejected,
    check_request,
    declares_tasks,
    is_stateless,
)
from .tasks import NativeTask, NativeTasks, task_2025

SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
# Without the header, the transport spec says to assume this revision.
DEFAULT_HEADER_VERSION = "2025-03-26"
# Requests that may take long, answered as SSE with keep-alives where the client accepts it.
LONG_METHODS = frozenset({"tools/call", "tasks/result"})
STATUS_NOTICE = "notifications/tasks/status"


class McpEndpoint:
    def __init__(
        self,
        executor: GovernedExecutor,
        audit: AuditLog,
        metrics: Metrics,
        keepalive_s: float,
        tasks: ShieldedTasks,
        native_tasks: NativeTasks,
        agents: Mapping[str, AgentBuild],
        allowed_hosts: Iterable[str] = DEFAULT_ALLOWED_HOSTS,
        pod: str = "",
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._max_body_bytes = max_body_bytes
        self._allowed_hosts = frozenset(filter(None, map(hostname, allowed_hosts)))
        self._metrics = metrics
        self.sessions = SessionStore()
        self.keepalive_s = keepalive_s
        self.dispatch = McpDispatch(executor, audit, metrics, tasks, native_tasks, agents, pod)
        native_tasks.on_change = self._tell_status

    async def handle(
        self,
        request: web.Request,
        agent: AgentBuild,
        end_user: EndUser | None = None,
        auth: AuthKind | None = None,
    ) -> web.StreamResponse:
        """``end_user``: the verified end user the request is for (SPEC §21), on every call's
        audit record and passed to the executor; ``auth``: how the agent proved who it is (on
        the records, for a pod with ``identity``)."""
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
                response = await self._post(request, agent, (end_user, auth))
            elif request.method == "DELETE":
                response = self._delete(request, agent)
            elif request.method == "GET" and request.headers.get(SESSION_HEADER):
                response = await self._stream(request, agent)
            else:
                response = no_stream()
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

    async def _post(
        self, request: web.Request, agent: AgentBuild, caller: Caller
    ) -> web.StreamResponse:
        accepts_json, accepts_sse = accepts(request)
        if not (accepts_json or accepts_sse):
            raise HttpError(406, INVALID_REQUEST, f"Not Acceptable: accept {JSON} and {SSE}")
        if not declares_json(request):
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
            return await self._post_stateless(request, agent, messages, batch, accepts_json, caller)
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
        # Notifications (initialized, cancelled) need no action: calls already sent complete
        # anyway. Responses answer this server's approval questions (SPEC §16).
        for response in (m for m in messages if m.kind == "response"):
            self.dispatch.elicitations.deliver(session.id, response)
        requests = [m for m in messages if m.kind == "request"]
        if not requests:
            return web.Response(status=202)
        version = session.protocol_version
        calls = any(m.method in LONG_METHODS for m in requests)
        if accepts_sse and (calls or not accepts_json):
            approvals = None
            if can_elicit(session.capabilities):
                approvals = ApprovalChannel(stateless=False, session_id=session.id)
            return await self._answer_sse(
                request, agent, version, requests, approvals, caller, session_id=session.id
            )
        answers = [await self._answer_one(agent, version, m, caller, session.id) for m in requests]
        return json_response(answers if batch else answers[0])

    async def _post_stateless(
        self,
        request: web.Request,
        agent: AgentBuild,
        messages: list[Message],
        batch: bool,
        accepts_json: bool,
        caller: Caller,
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
            meta = message.params.get("_meta") if isinstance(message.params, dict) else None
            capabilities = meta.get(CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
            approvals = ApprovalChannel(stateless=True) if can_elicit(capabilities) else None
            tasks = declares_tasks(capabilities)
            return await self._answer_sse(
                request, agent, version, [message], approvals, caller, tasks
            )
        answer = await self._answer_one(agent, version, message, caller)
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
        session = self.sessions.create(agent.agent.id, version, params.capabilities)
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

    async def _answer_one(
        self,
        agent: AgentBuild,
        version: str,
        message: Message,
        caller: Caller,
        session_id: str | None = None,
    ) -> dict[str, Any]:
        """The answer to one request, sent as plain JSON."""
        end_user, auth = caller
        request = McpRequest(
            agent, version, message, False, end_user=end_user, auth=auth, session_id=session_id
        )
        return await self.dispatch.answer(request)

    # -- SSE -------------------------------------------------------------------------------------

    async def _answer_sse(
        self,
        request: web.Request,
        agent: AgentBuild,
        version: str,
        requests: list[Message],
        approvals: ApprovalChannel | None,
        caller: Caller,
        tasks: bool = False,
        session_id: str | None = None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": SSE, "Cache-Control": "no-cache"})
        await response.prepare(request)
        connected = True

        async def keepalive(data: bytes) -> None:
            nonlocal connected
            connected = connected and await write(response, data)

        async def send(data: bytes) -> bool:
            await keepalive(data)
            return connected

        if approvals is not None and not approvals.stateless:
            approvals = dataclasses.replace(approvals, send=send)
        end_user, auth = caller
        work = self.dispatch.answer_all(
            agent, version, requests, approvals, end_user, tasks, auth, session_id
        )
        answers = await with_keepalives(work, keepalive, self.keepalive_s)
        if connected:
            for answer in answers:
                if not await write(response, sse_event(orjson.dumps(answer))):
                    break
            else:
                await response.write_eof()
        return response

    # -- GET: the session's stream ------------------------------------------------------------

    async def _stream(self, request: web.Request, agent: AgentBuild) -> web.StreamResponse:
        """The session's own stream: the status of the tasks its calls made, as they change
        (``notifications/tasks/status``), and keep-alives, until the client leaves or the
        session ends. One per session; a session without tasks (before 2025-11-25) has none."""
        session = self._session_for(request, agent)
        if session.protocol_version < TASKS_SINCE:
            return no_stream()
        if not accepts(request)[1]:
            raise HttpError(406, INVALID_REQUEST, f"Not Acceptable: accept {SSE}")
        notices = session.notices
        if notices.listening:
            raise HttpError(409, INVALID_REQUEST, "Conflict: this session's stream is open")
        notices.listening = True
        try:
            response = web.StreamResponse(
                headers={"Content-Type": SSE, "Cache-Control": "no-cache"}
            )
            await response.prepare(request)
            while not notices.closed:
                taken = await notices.take(self.keepalive_s)
                data = b"".join(map(sse_event, taken)) if taken else KEEPALIVE
                if not await write(response, data):
                    break
        finally:
            notices.stop_listening()
        return response

    def _tell_status(self, task: NativeTask) -> None:
        """A task's status changed: its own session's stream is told, if it is open (the
        session is looked up with the task's agent, so no other agent's stream ever is)."""
        if task.session_id is None:
            return
        session = self.sessions.get(task.session_id, task.agent, touch=False)
        if session is None:
            return
        notice = {"jsonrpc": "2.0", "method": STATUS_NOTICE, "params": task_2025(task)}
        session.notices.put(task.id, orjson.dumps(notice))

    # -- DELETE ----------------------------------------------------------------------------------

    def _delete(self, request: web.Request, agent: AgentBuild) -> web.Response:
        session_id = request.headers.get(SESSION_HEADER)
        if not session_id:
            raise HttpError(400, INVALID_REQUEST, f"Bad Request: missing {SESSION_HEADER} header")
        if not self.sessions.terminate(session_id, agent.agent.id):
            raise HttpError(404, INVALID_REQUEST, "Session not found")
        return web.Response(status=204)


def no_stream() -> web.Response:
    response = jsonrpc_error(
        405,
        INVALID_REQUEST,
        "Method Not Allowed: use POST (and DELETE to end a session)",
    )
    response.headers["Allow"] = "POST, DELETE"
    return response


def declares_json(request: web.Request) -> bool:
    """Whether the body is declared JSON. The standard library's MIME parser under aiohttp
    raises on some malformed parameter lists (``;0*``); such a header declares nothing."""
    try:
        return request.content_type == JSON
    except (IndexError, ValueError):
        return False
