"""The operator API (SPEC §9.3, §15): list approvals and decide them; read the audit.

``GET /operator/approvals`` (``?all=1`` adds recently finished ones),
``POST /operator/approvals/{id}`` with ``{"decision": "approve"|"deny", "reason": "..."}`` and
``GET /operator/audit`` (newest records per agent) and ``GET /operator/tasks`` (the MCP tasks
not finished, SPEC §22). Every answer names the pod.
Only the operator token (``CLAW_OPERATOR_TOKEN`` in the sidecar's environment) opens it: an
agent's token is refused, and without the variable the API is closed.
"""

from __future__ import annotations

import hmac
from typing import Any

import orjson
from aiohttp import web

from ...model.env_names import OPERATOR_TOKEN_ENV
from ...state.approvals import ApprovalError
from ..front.edge import AuthError, presented_token
from ..request.context import STATE_KEY, SidecarState
from .console_data import AuditFilter, recent_records
from .operator_auth import SIGN_IN_KEY, audit_failure, peer_of, retry_after

OPERATOR = "operator"
MAX_REASON = 1000


def _error(status: int, code: str, message: str) -> web.Response:
    body = {"error": {"code": code, "message": message}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


async def _authorised(request: web.Request, state: SidecarState) -> web.Response | None:
    """None when the operator token was presented; else the refusal. A peer whose last tries
    failed waits before its token is even compared (``operator_auth.py``)."""
    if state.operator_token is None:
        return _error(
            403, "operator_api_closed", f"the operator API needs {OPERATOR_TOKEN_ENV} to be set"
        )
    try:
        token = presented_token(request.headers)
    except AuthError as err:
        return _error(401, err.code, err.message)
    throttle = request.app[SIGN_IN_KEY]
    peer = peer_of(request)
    wait_s = throttle.wait_s(peer)
    if wait_s > 0:
        seconds = retry_after(wait_s)
        message = f"wrong tokens from this address: retry in {seconds} s"
        refusal = _error(429, "too_many_failures", message)
        refusal.headers["Retry-After"] = seconds
        return refusal
    if hmac.compare_digest(token.encode(), state.operator_token.encode()):
        throttle.succeeded(peer)
        return None
    await audit_failure(request, "operator_api", *throttle.failed(peer))
    try:
        state.verifier.authenticate(request.headers)
    except AuthError:
        return _error(403, "invalid_token", "the presented token is not the operator token")
    return _error(403, "agent_token_refused", "agent tokens cannot use the operator API")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


async def list_approvals(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    refusal = await _authorised(request, state)
    if refusal is not None:
        return refusal
    everything = request.query.get("all") in ("1", "true")
    approvals = state.governed.approvals.listing(include_finished=everything)
    return _json({"pod": state.config.pod, "approvals": [a.public() for a in approvals]})


async def audit_records(request: web.Request) -> web.Response:
    """The newest audit records per agent, newest first (the console's filters: ``agent``,
    ``tool``, ``outcome``, ``since``, ``until``, ``limit``)."""
    state = request.app[STATE_KEY]
    refusal = await _authorised(request, state)
    if refusal is not None:
        return refusal
    wanted = AuditFilter.from_query(request.query)
    return _json({"pod": state.config.pod, "agents": recent_records(state, wanted)})


async def decide_approval(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    refusal = await _authorised(request, state)
    if refusal is not None:
        return refusal
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _error(400, "invalid_json", "the body must be JSON")
    decision = body.get("decision") if isinstance(body, dict) else None
    if decision not in ("approve", "deny"):
        return _error(400, "invalid_decision", 'send {"decision": "approve" | "deny", "reason"}')
    reason = body.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
        return _error(400, "invalid_reason", f"reason must be text of at most {MAX_REASON} chars")
    who = body.get("who") if isinstance(body.get("who"), str) else OPERATOR
    try:
        approval = await state.governed.decide(
            request.match_info["approval_id"], decision, reason, who[:100]
        )
    except ApprovalError as err:
        return _error(err.status, "approval_not_open", str(err))
    return _json({**approval.public(), "pod": state.config.pod})


async def running_tasks(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    refusal = await _authorised(request, state)
    if refusal is not None:
        return refusal
    tasks = state.mcp.dispatch.native_tasks.overview()
    return _json({"pod": state.config.pod, "tasks": tasks})


def add_operator_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/operator/approvals", list_approvals)
    router.add_post("/operator/approvals/{approval_id}", decide_approval)
    router.add_get("/operator/audit", audit_records)
    router.add_get("/operator/tasks", running_tasks)
