"""The sidecar's other routes: the model list, ``/mcp`` and the health and metrics probes."""

from __future__ import annotations

import os

import orjson
from aiohttp import web

from ..codecs import codec_for_caller
from ..mcp.http import jsonrpc_error
from ..model.errors import ApiError
from ..observability import tracing
from .accounting.budget_gate import end_user_rate
from .front.edge import AuthError, mark_authenticated
from .request.context import STATE_KEY

JSONRPC_UNAUTHORIZED = -32001
JSONRPC_LIMITED = -32000  # an implementation-defined server error (JSON-RPC 2.0 §5.1)


async def models(request: web.Request) -> web.Response:
    """The exact model ids the agent may pick, each only in its own API's shape: Anthropic's
    for Anthropic clients (they send ``anthropic-version``), OpenAI's for the others."""
    state = request.app[STATE_KEY]
    await state.verifier.identify(request.headers)
    mark_authenticated(request)
    codec = codec_for_caller(request.path, request.headers)
    body = codec.models_list(state.router.exact_models(codec.api))
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def model(request: web.Request) -> web.Response:
    """One model the agent may use, by its id (an exact id or one its globs allow)."""
    state = request.app[STATE_KEY]
    await state.verifier.identify(request.headers)
    mark_authenticated(request)
    codec = codec_for_caller(request.path, request.headers)
    model_id = request.match_info["model_id"]
    if not state.router.allows(codec.api, model_id):
        raise ApiError(404, "model_not_found", f"model {model_id!r} is not available here")
    provider, _, _ = state.router.resolve(codec.api, model_id)
    body = codec.model_entry(provider, model_id)
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def mcp(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    try:
        agent, end_user, auth = await state.verifier.identify(request.headers)
    except AuthError as err:
        return jsonrpc_error(err.status, JSONRPC_UNAUTHORIZED, err.message)
    mark_authenticated(request)
    refusal = await end_user_rate(state, end_user) if end_user else None
    if refusal is not None:
        response = jsonrpc_error(refusal.status, JSONRPC_LIMITED, refusal.message)
        response.headers.update(refusal.headers)
        return response
    with tracing.agent_span("/mcp", request.headers):
        tracing.name_agent(agent.agent.id)
        return await state.mcp.handle(request, agent, end_user, auth)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    problems = []
    if not os.access(state.state_dir, os.W_OK):
        problems.append("state directory is not writable")
    if state.state_lock is not None and not state.state_lock.held():
        problems.append("state directory lock lost (the directory or its .lock was replaced)")
    tools = state.drift.report()
    if problems:
        return web.json_response({"status": "not ready", "problems": problems, **tools}, status=503)
    return web.json_response({"status": "ready", "pod": state.config.pod, **tools})


async def metrics_route(request: web.Request) -> web.Response:
    body, content_type = request.app[STATE_KEY].metrics.render()
    return web.Response(body=body, headers={"Content-Type": content_type})
