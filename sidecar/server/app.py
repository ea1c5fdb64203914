"""The sidecar application: the LLM routes (``serve_llm``, whichever server takes the request),
aiohttp's other routes, the protocol-error middleware and the sidecar's lifecycle."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
from aiohttp import web

from clawpod.sidecar.audit.chain import audit_key
from clawpod.sidecar.audit.log import AuditLog
from clawpod.sidecar.codecs import CODECS, codec_for_api, codec_for_path
from clawpod.sidecar.codecs.base import Codec
from clawpod.sidecar.execution.executor import ToolExecutor
from clawpod.sidecar.manifest import AgentBuild, Build
from clawpod.sidecar.mcp.endpoint import McpEndpoint, jsonrpc_error
from clawpod.sidecar.mediation.continuity import ContinuityStore
from clawpod.sidecar.model.errors import ApiError
from clawpod.sidecar.observability.logs import log_request
from clawpod.sidecar.observability.metrics import Metrics
from clawpod.sidecar.server.accounting import record_request
from clawpod.sidecar.server.auth import AuthError, TokenVerifier
from clawpod.sidecar.server.context import STATE_KEY, RequestContext, SidecarState
from clawpod.sidecar.server.errors import JSON_HEADERS, reply_error
from clawpod.sidecar.server.exchange import AiohttpExchange, Exchange
from clawpod.sidecar.server.mediated import CLIENT_CLOSED, handle_mediated
from clawpod.sidecar.server.passthrough import pass_through
from clawpod.sidecar.server.routing import ModelRouter
from clawpod.sidecar.server.upstream import UpstreamClient
from clawpod.sidecar.tasks import ShieldedTasks
from clawpod.sidecar.transport.keepalive import keepalive_interval

log = logging.getLogger("sidecar.server")

# Unique across restarts (random prefix) without a syscall per request (counter).
_REQUEST_ID_PREFIX = "req_" + os.urandom(6).hex()
_request_ids = (f"{_REQUEST_ID_PREFIX}{n:08x}" for n in itertools.count(1))
JSONRPC_UNAUTHORIZED = -32001
JSONRPC_INTERNAL_ERROR = -32603
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(
    build: Build, *, state_dir: Path, env: Mapping[str, str] | None = None
) -> web.Application:
    """The sidecar for ``build``; provider keys and tool credentials are read from ``env``."""
    env = os.environ if env is None else env
    state_dir = Path(state_dir)
    config = build.config
    metrics = Metrics()
    tasks = ShieldedTasks()
    executor = ToolExecutor(env=env, metrics=metrics, tasks=tasks)
    # Raises AuditKeyError / AuditStateError: a sidecar that cannot audit must not start.
    audit = AuditLog(state_dir, key=audit_key(env), agents=build.agents)
    keepalive_s = keepalive_interval(env)
    state = SidecarState(
        config=config,
        state_dir=state_dir,
        upstream=UpstreamClient(config, env, metrics),
        executor=executor,
        audit=audit,
        metrics=metrics,
        continuity=ContinuityStore(state_dir, agents=len(build.agents)),  # per-agent quotas
        verifier=TokenVerifier(build),
        router=ModelRouter(config),
        mcp=McpEndpoint(executor, audit, metrics, keepalive_s, tasks),
        sse_keepalive_s=keepalive_s,
        tasks=tasks,
    )
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[protocol_errors])
    app[STATE_KEY] = state
    app.cleanup_ctx.append(_lifecycle)
    for route in LLM_ROUTES:
        handler = _aiohttp_llm_handler(route)
        for path in aliases(route.path):
            app.router.add_route(route.method, path, handler)
    app.router.add_get("/v1/models", models)
    app.router.add_route("*", "/mcp", mcp)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_route)
    return app


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE_KEY]
    state.state_dir.mkdir(parents=True, exist_ok=True)
    await state.executor.start()
    try:
        yield
    finally:
        await state.upstream.close()  # model calls still waiting fail fast
        await state.tasks.drain()  # tool calls already sent finish and are audited
        await state.executor.close()
        await state.continuity.close()
        await state.audit.close()  # flushes pending audit records to disk


# --- /v1 LLM routes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LlmRoute:
    path: str
    codec: Codec
    mediate: bool  # side routes (count_tokens) make no model call: always passed through
    method: str = "POST"
    upstream: str | None = None
    """A resource route's upstream path with the route's {parameters}; None for the others."""


LLM_ROUTES = [
    route
    for codec in CODECS
    for route in (
        LlmRoute(codec.route, codec, mediate=True),
        *(LlmRoute(path, codec, mediate=False) for path in codec.side_routes),
        *(
            LlmRoute(path, codec, mediate=False, method=method, upstream=upstream)
            for (method, path), upstream in codec.resource_routes.items()
        ),
    )
]
V1 = "/v1"


def aliases(path: str) -> tuple[str, ...]:
    """A /v1 route and the same route without /v1, for clients whose base URL has none."""
    return (path, path.removeprefix(V1)) if path.startswith(V1 + "/") else (path,)


async def serve_llm(exchange: Exchange, route: LlmRoute, state: SidecarState) -> None:
    """One request to an LLM route, on whichever server took it; every failure leaves in the
    caller's protocol shape and nothing internal leaks."""
    try:
        await _llm_request(exchange, state, route)
    except AuthError as err:
        log_request(route=route.path, status=err.status, code=err.code, agent=None)
        await reply_error(exchange, route.codec, err)
    except ApiError as err:
        await reply_error(exchange, route.codec, err)
    except ConnectionError:
        pass  # the client left before its request could be read: nothing to answer
    except Exception:
        log.exception("unhandled error on %s %s", route.method, route.path)
        err = ApiError(500, "internal_error", "the sidecar failed on this request", "api_error")
        await reply_error(exchange, route.codec, err)


def _aiohttp_llm_handler(route: LlmRoute) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        exchange = AiohttpExchange(request)
        await serve_llm(exchange, route, request.app[STATE_KEY])
        # None: the client left before anything was sent; aiohttp discards this.
        return exchange.response or web.Response(status=CLIENT_CLOSED)

    return handle


async def _llm_request(exchange: Exchange, state: SidecarState, route: LlmRoute) -> None:
    started = time.monotonic()
    codec = route.codec
    agent = state.verifier.authenticate(exchange.headers)
    ctx = RequestContext(
        state=state,
        agent=agent,
        codec=codec,
        route=route.path,
        request_id=next(_request_ids),
        started=started,
        forward_headers=_forward_headers(exchange.headers, codec),
    )
    inflight = state.metrics.inflight
    inflight[route.path] += 1
    body: dict[str, Any] = {}
    try:
        try:
            raw = await exchange.read_body(state.config.max_body_bytes)
            body = _parse_body(raw) if raw or route.upstream is None else {}
            ctx.stream = body.get("stream") is True or _query_streams(exchange.query)
            if route.upstream is not None:
                _address_resource(ctx, exchange, route.upstream)
            if route.upstream is None or "model" in body:
                ctx.provider_name, _, ctx.model = state.router.resolve(codec.api, body.get("model"))
            else:
                ctx.provider_name = state.router.first_provider(codec.api)
        except ApiError as err:
            requested = body.get("model")
            ctx.model = requested if isinstance(requested, str) else None
            await reply_error(exchange, codec, err)
            await record_request(ctx, http_status=err.status, error_code=err.code)
            return
        if ctx.model is not None and ctx.model != body["model"]:
            body["model"] = ctx.model
            raw = orjson.dumps(body)
        if route.mediate and agent.agent.mode == "mediated" and agent.tools.tools:
            await handle_mediated(exchange, ctx, body)
        else:
            await pass_through(exchange, ctx, raw if raw or route.method == "POST" else None)
    finally:
        inflight[route.path] -= 1


def _address_resource(ctx: RequestContext, exchange: Exchange, upstream: str) -> None:
    """The upstream path of a provider-held object: each parameter one encoded segment."""
    segments = {name: quote(value, safe="") for name, value in exchange.path_params.items()}
    ctx.method = exchange.method
    ctx.upstream_path = upstream.format_map(segments)
    if exchange.query:
        ctx.upstream_path += "?" + exchange.query


def _query_streams(query: str) -> bool:
    """A stored response read back as a stream (``GET /v1/responses/{id}?stream=true``)."""
    return "stream=true" in query.split("&")


def _parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "invalid_json", f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "request body must be a JSON object")
    return body


def _forward_headers(headers: Mapping[str, str], codec: Codec) -> dict[str, str]:
    return {name: headers[name] for name in codec.forwarded_headers if name in headers}


# --- other routes -----------------------------------------------------------------------------


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
    return await state.mcp.handle(request, agent)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    problems = []
    if not os.access(state.state_dir, os.W_OK):
        problems.append("state directory is not writable")
    if problems:
        return web.json_response({"status": "not ready", "problems": problems}, status=503)
    return web.json_response({"status": "ready", "pod": state.config.pod})


async def metrics_route(request: web.Request) -> web.Response:
    body, content_type = request.app[STATE_KEY].metrics.render()
    return web.Response(body=body, headers={"Content-Type": content_type})


# --- errors -----------------------------------------------------------------------------------


@web.middleware
async def protocol_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves in the caller's protocol shape; nothing internal leaks."""
    try:
        return await handler(request)
    except AuthError as err:
        log_request(route=request.path, status=err.status, code=err.code, agent=None)
        return _error_reply(request, err)
    except ApiError as err:
        return _error_reply(request, err)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error_reply(request, _from_http_exception(exc))
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        err = ApiError(500, "internal_error", "the sidecar failed on this request", "api_error")
        return _error_reply(request, err)


def _error_reply(request: web.Request, err: ApiError) -> web.Response:
    if request.path == "/mcp":
        return jsonrpc_error(err.status, JSONRPC_INTERNAL_ERROR, err.message)
    codec = _caller_codec(request)
    return web.Response(status=err.status, body=codec.error_json(err), headers=JSON_HEADERS)


def _caller_codec(request: web.Request) -> Codec:
    """The protocol a request to any path speaks: its route's, else Anthropic's when it says
    so (its version header, a Messages path), else OpenAI's."""
    path = request.path if request.path.startswith(V1 + "/") else V1 + request.path
    codec = codec_for_path(path)
    if codec is not None:
        return codec
    anthropic = codec_for_api("anthropic")
    if "anthropic-version" in request.headers or path.startswith(anthropic.route):
        return anthropic
    return codec_for_api("openai")


def _from_http_exception(exc: web.HTTPException) -> ApiError:
    codes = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
    message = {
        404: "no such route",
        405: "method not allowed on this route",
    }.get(exc.status, exc.reason)
    return ApiError(exc.status, codes.get(exc.status, f"http_{exc.status}"), message)
