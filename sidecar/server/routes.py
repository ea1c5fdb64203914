"""The sidecar's other routes: the model list, ``/mcp`` and the health and metrics probes."""

from __future__ import annotations

import os

import orjson
from aiohttp import web

from clawpod.sidecar.codecs import codec_for_api
from clawpod.sidecar.manifest import AgentBuild
from clawpod.sidecar.mcp.endpoint import jsonrpc_error
from clawpod.sidecar.observability import tracing
from clawpod.sidecar.server.auth import AuthError
from clawpod.sidecar.server.context import STATE_KEY

JSONRPC_UNAUTHORIZED = -32001


async def models(request: web.Request) -> web.Response:
    """The model globs the agent may use, in Anthropic's list shape for Anthropic clients."""
    state = request.app[STATE_KEY]
    state.verifier.authenticate(request.headers)
    codec = codec_for_api("anthropic" if "anthropic-version" in request.headers else "openai")
    body = codec.models_list(state.router.patterns())
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def mcp(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    try:
        agent: AgentBuild = state.verifier.authenticate(request.headers)
    except AuthError as err:
        return jsonrpc_error(err.status, JSONRPC_UNAUTHORIZED, err.message)
    with tracing.agent_span("/mcp", request.headers):
        tracing.name_agent(agent.agent.id)
        return await state.mcp.handle(request, agent)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    problems = []
    if not os.access(state.state_dir, os.W_OK):
        problems.append("state directory is not writable")
    tools = state.drift.report()
    if problems:
        return web.json_response({"status": "not ready", "problems": problems, **tools}, status=503)
    return web.json_response({"status": "ready", "pod": state.config.pod, **tools})


async def metrics_route(request: web.Request) -> web.Response:
    body, content_type = request.app[STATE_KEY].metrics.render()
    return web.Response(body=body, headers={"Content-Type": content_type})
