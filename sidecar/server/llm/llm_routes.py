"""The LLM routes of every registered codec (and their aliases without ``/v1``): authenticate,
read and route the body, then mediate or pass through. Every failure leaves in the caller's
protocol shape and nothing internal leaks.

What a request can need is decided before it comes, so its path calls only what applies: the
budget gate for an agent with a budget (``TokenBudgets.governed``), the translation plan for a
route with a target of another protocol (``RoutePlan.crosses``), the stored-object checks for
a protocol whose provider stores objects, spans while tracing is on."""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import orjson
from aiohttp import web

from ...codecs import CODECS, V1
from ...codecs.base import Codec
from ...manifest import AgentBuild, without_billing_betas
from ...model.errors import ApiError, internal_error
from ...observability import tracing
from ...observability.logs import log_request
from ...request_body import check_shape
from ...state.stored_objects import refs
from ..accounting.accounting import record_request
from ..accounting.budget_gate import admit, end_user_rate, release
from ..accounting.counting import with_managed_tools
from ..front.edge import DIRECT_ROUTES, AuthError
from ..mediated.mediated import handle_mediated
from ..mediated.model_call import CLIENT_CLOSED
from ..providers.upstream import plan_route
from ..request.context import STATE_KEY, SidecarState
from ..request.errors import reply_error
from ..request.exchange import AiohttpExchange, Caller, Exchange, RequestContext, Routing
from ..translated import translated
from .passthrough import pass_through

log = logging.getLogger(__name__)

# Unique across restarts (random prefix) without a syscall per request (counter).
_REQUEST_ID_PREFIX = "req_" + os.urandom(6).hex()
_request_ids = (f"{_REQUEST_ID_PREFIX}{n:08x}" for n in itertools.count(1))
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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


def aliases(path: str) -> tuple[str, ...]:
    """A /v1 route and the same route without /v1, for clients whose base URL has none."""
    return (path, path.removeprefix(V1)) if path.startswith(V1 + "/") else (path,)


async def serve_llm(exchange: Exchange, route: LlmRoute, state: SidecarState) -> None:
    """One request to an LLM route, on whichever server took it; every failure leaves in the
    caller's protocol shape and nothing internal leaks."""
    try:
        if tracing.tracer is None:
            await _llm_request(exchange, state, route)
        else:
            with tracing.agent_span(route.path, exchange.headers):
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
        await reply_error(exchange, route.codec, internal_error())


def _aiohttp_llm_handler(route: LlmRoute, app: web.Application, *, routed: bool) -> Handler:
    """The route's aiohttp handler; ``routed`` False: the edge hands it requests directly."""

    async def handle(request: web.Request) -> web.StreamResponse:
        exchange = AiohttpExchange(request, routed=routed)
        await serve_llm(exchange, route, app[STATE_KEY])
        # None: the client left before anything was sent; aiohttp discards this.
        return exchange.response or web.Response(status=CLIENT_CLOSED)

    return handle


async def _llm_request(exchange: Exchange, state: SidecarState, route: LlmRoute) -> None:
    started = time.monotonic()
    codec = route.codec
    agent, end_user, auth = await state.verifier.identify(exchange.headers)
    exchange.authenticated()
    if tracing.tracer is not None:
        tracing.name_agent(agent.agent.id)
    caller = Caller(
        agent=agent,
        codec=codec,
        route=route.path,
        request_id=next(_request_ids),
        started=started,
        forward_headers=_forward_headers(exchange.headers, codec),
        # The agents with a budget are known at start; an end user's is asked only with one.
        budgeted=agent.agent.id in state.budgets.governed
        or (end_user is not None and state.budgets.applies(agent.agent.id, end_user)),
        end_user=end_user,
        auth=auth,
    )
    ctx = RequestContext(state, caller)
    with state.body_bytes.holding(agent.agent.id) as take:
        await _read_and_serve(exchange, state, route, ctx, take)


async def _read_and_serve(
    exchange: Exchange,
    state: SidecarState,
    route: LlmRoute,
    ctx: RequestContext,
    take: Callable[[int], None],
) -> None:
    codec, agent = ctx.caller.codec, ctx.caller.agent
    inflight = state.metrics.inflight
    inflight[route.path] += 1
    body: dict[str, Any] = {}
    try:
        try:
            limit = state.config.max_body_bytes
            raw = await exchange.read_body(limit, take)
            await check_shape(raw, limit)
            body = _parse_body(raw) if raw or route.upstream is None else {}
            stream = body.get("stream") is True or _query_streams(exchange.query)
            method, path = "POST", None
            if route.upstream is not None:
                method, path = _address_resource(exchange, route.upstream)
            read = Routing(stream, body, method=method, upstream_path=path)
            try:
                routing = _route(ctx, route, read)
            except ApiError:
                ctx = ctx.routed(read)  # refused by routing: audited with what the body said
                raise
            ctx = ctx.routed(routing)
            if codec.stores_objects:
                # After translation's refusals: a provider of another protocol stores nothing,
                # so a previous_response_id there is 400 whoever's it is (docs/translation.md).
                _check_stored_objects(ctx, exchange, body)
        except ApiError as err:
            _called_no_model(ctx, body)
            await reply_error(exchange, codec, err, final=True)  # the body or its routing
            await record_request(ctx, http_status=err.status, error_code=err.code)
            return
        refusal = await end_user_rate(state, ctx.caller.end_user) if ctx.caller.end_user else None
        if refusal is None and ctx.caller.budgeted:
            refusal = await admit(ctx, body)
        if refusal is not None:
            _called_no_model(ctx, body)
            await reply_error(exchange, codec, refusal)
            await record_request(ctx, http_status=refusal.status, error_code=refusal.code)
            return
        if ctx.ledger.model is not None and ctx.ledger.model != body["model"]:
            body["model"] = ctx.ledger.model
            raw = orjson.dumps(body)
        withheld = _withheld(agent, codec, body)
        if withheld is not None:
            ctx.ledger.audit_extra = {"tools_injected": False, "reason": withheld}
        if ctx.routing.translations is not None and translated.counts_here(ctx):
            await translated.answer_count(exchange, ctx, body)
        elif route.mediate and _injects(agent, withheld):
            await handle_mediated(exchange, ctx, body)
        elif route.path in codec.side_routes and _injects(agent, withheld):
            counted = orjson.dumps(with_managed_tools(codec, agent, body))
            await pass_through(exchange, ctx, counted)
        else:
            if route.mediate and ctx.routing.stream:
                raw = _ask_stream_usage(ctx, codec, body, raw)
            await pass_through(exchange, ctx, raw if raw or route.method == "POST" else None)
    finally:
        inflight[route.path] -= 1
        if ctx.caller.budgeted:
            await release(ctx)


def _ask_stream_usage(ctx: RequestContext, codec: Codec, body: dict[str, Any], raw: bytes) -> bytes:
    """Every stream is charged (#32): where the protocol reports usage only when asked, the
    sidecar asks, and strips that usage from a client that did not."""
    asking = codec.asking_stream_usage(body)
    if asking is None:
        return raw
    ctx.ledger.strip_usage = True
    return orjson.dumps(asking)


def _injects(agent: AgentBuild, withheld: str | None) -> bool:
    """Whether this request gets the agent's managed tools (mediated), or goes through as is
    (``withheld``: why not, from ``_withheld``)."""
    return agent.agent.mode == "mediated" and bool(agent.tools.tools) and withheld is None


def _called_no_model(ctx: RequestContext, body: dict[str, Any]) -> None:
    """A request refused before any model call is recorded with the model it asked for and
    no provider: none was called, and none spent anything on it."""
    requested = body.get("model")
    ctx.ledger.model = requested if isinstance(requested, str) else None
    ctx.ledger.provider_name = None


def _withheld(agent: AgentBuild, codec: Codec, body: dict[str, Any]) -> str | None:
    """Why a mediated agent's request gets no tools under ``tool-injection: auto`` (audited as
    ``tools_injected: false``), or None: it asks for data (structured output), or it is an
    auxiliary request about the conversation (a title, a summary, a compaction: SPEC §7.3)."""
    if agent.agent.mode != "mediated" or agent.agent.tool_injection == "always":
        return None
    if codec.data_only(body):
        return "data_only"
    if codec.auxiliary(body):
        return "auxiliary"
    return None


def _check_stored_objects(ctx: RequestContext, exchange: Exchange, body: dict[str, Any]) -> None:
    """Refuse a request that names a stored object its owner (the agent, for its end user) does
    not hold: every agent shares the provider key, so the provider cannot refuse it (see
    ``stored_objects``)."""
    pairs = ctx.caller.codec.stored_references(exchange.path_params, body)
    if not pairs:  # always, for a protocol without stored objects
        return
    referenced = refs(pairs)
    for ref in referenced:
        why = ctx.state.objects.refusal(ctx.caller.owner, ref)
        if why is not None:
            ctx.note_objects(f"refused ({why})", [ref])
            raise ApiError(
                404,
                f"{ref.kind}_not_found",
                f"no {ref.kind} with id {ref.id!r} was stored for this agent",
                "invalid_request_error",
            )
    ctx.note_objects("referenced", referenced)


def _route(ctx: RequestContext, route: LlmRoute, read: Routing) -> Routing:
    """Where the request goes: the targets the router plans for its model (a resource route
    without one: its protocol's first provider), each of another protocol with the body
    translated for it (``translated.plan``). Sets the ledger's first provider and model."""
    state, ledger = ctx.state, ctx.ledger
    codec, agent, body = ctx.caller.codec, ctx.caller.agent, read.request
    if route.upstream is None or "model" in body:
        plan = state.router.plan(codec.api, codec.name, body.get("model"))
        ledger.provider_name, _, ledger.model = plan.targets[0]
        translations = None
        if route.upstream is None and plan.crosses:
            # A target of another protocol: refused or planned.
            mediated = route.mediate and _injects(agent, _withheld(agent, codec, body))
            translations = translated.plan(ctx, plan.targets, body, mediated=mediated)
        return replace(read, targets=plan.targets, walks=plan.walks, translations=translations)
    ledger.provider_name = name = state.router.first_provider(codec.api, codec.name)
    targets = [(name, state.config.providers[name], None)]
    return replace(read, targets=targets, walks=plan_route(codec.name, targets).walks)  # type: ignore[arg-type]


def _address_resource(exchange: Exchange, upstream: str) -> tuple[str, str]:
    """The method and upstream path of a provider-held object: each parameter one encoded
    segment."""
    segments = {name: quote(value, safe="") for name, value in exchange.path_params.items()}
    path = upstream.format_map(segments)
    return exchange.method, path + "?" + exchange.query if exchange.query else path


def _query_streams(query: str) -> bool:
    """A stored response read back as a stream (``GET /v1/responses/{id}?stream=true``)."""
    return "stream=true" in query.split("&")


def _parse_body(raw: bytes | bytearray) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, "invalid_json", f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "request body must be a JSON object")
    return body


def _forward_headers(headers: Mapping[str, str], codec: Codec) -> dict[str, str]:
    forwarded = {name: headers[name] for name in codec.forwarded_headers if name in headers}
    for name, value in forwarded.items():
        if not value.isascii():  # bytes that were not UTF-8 arrive as surrogates
            raise ApiError(400, "invalid_header", f"the {name} header is not ASCII text")
    betas = forwarded.get("anthropic-beta")
    if betas is not None:  # the betas that bill differently are the pod's to set
        kept = without_billing_betas(betas)
        if kept:
            forwarded["anthropic-beta"] = kept
        else:
            del forwarded["anthropic-beta"]
    return forwarded


def add_llm_routes(app: web.Application) -> None:
    """Every codec's routes, each also without ``/v1``; those without parameters are also the
    edge's direct routes (served without the router, the middlewares and the response signal:
    ``serve_llm`` shapes every failure itself)."""
    direct = app.setdefault(DIRECT_ROUTES, {})
    for route in LLM_ROUTES:
        handler = _aiohttp_llm_handler(route, app, routed=True)
        for path in aliases(route.path):
            app.router.add_route(route.method, path, handler)
        if route.upstream is None:
            unrouted = _aiohttp_llm_handler(route, app, routed=False)
            direct.update({(route.method, path): unrouted for path in aliases(route.path)})
