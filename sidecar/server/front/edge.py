"""The inbound edge: aiohttp's HTTP/1.1 server with the bounds it lacks.

aiohttp parses every request (line, field and header-count limits, chunked framing, pipelining
with a bounded queue and backpressure). This module adds, per connection:

- a request-head deadline: a new connection must send its first whole head within
  ``head_timeout_s`` of connecting, and a kept-alive one each further head within as long of
  its first byte, else the connection is closed (a socket that never sends a byte holds its
  slot no longer than that);
- a head-size bound over all its fields together (aiohttp bounds each field, not their sum):
  while a head arrives (close) and once it is parsed (431);
- a body-idle deadline: a request body that stops arriving for ``body_idle_timeout_s`` closes
  the connection (time the sidecar itself stopped reading, for backpressure, does not count);
- a cap on open connections, and a lower one per peer address: at the cap, the connection
  idle longest that never carried an authenticated request is closed to make room; when
  there is none (or the peer is at its own cap), the new connection's first request is
  answered 503 in the caller's protocol with ``Connection: close`` (see
  ``refuse_at_the_edge``);
- parse failures answered as JSON, not aiohttp's text page with a logged traceback.
Nothing here parses HTTP: it counts bytes and watches aiohttp's own queue of parsed requests.

Direct routes (``DIRECT_ROUTES``, the LLM routes without path parameters) are handed their
request by the edge itself when it refuses nothing: the application's router, middlewares and
response signal, which every request would otherwise enter, are for the routes that need them.

Who a request is from is decided here too (``TokenVerifier``): the per-agent token, checked in
constant time against the build's hashes, or a JWT from the pod's identity provider whose
claim names the agent (``x-claw.identity``); and the end user it is for, from the pod's
end-user header (``x-claw.end-users``), both verified by ``identity/``. A connection that
carried an authenticated request is the last one evicted.

What leaves through the edge leaves in the caller's protocol: ``protocol_errors`` answers
every failure on aiohttp's routes, the edge's refusals among them, as JSON-RPC on ``/mcp`` and
in the codec's error shape elsewhere, with nothing internal leaked.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import StreamReader, hdrs, web

from ...codecs import codec_for_caller
from ...identity.end_users import EndUserVerifier
from ...identity.tokens import JwtVerifier, TokenRejected, key_sets
from ...manifest import AgentBuild, Build, EdgeConfig, SidecarConfig
from ...mcp.http import jsonrpc_error
from ...model.end_user import AuthKind, EndUser
from ...model.errors import ApiError, internal_error
from ...observability.logs import log_request
from ...transport.client import HttpClient
from .aiohttp_compat import HandlerBase, RunnerBase, ServerBase, check


class AuthError(ApiError):
    """401 when no usable token was presented, 403 when it matches no agent."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        if code is None:
            code = "invalid_token" if status == 403 else "missing_token"
        super().__init__(status, code, message)


NOT_AN_AGENT = "the presented token does not belong to any agent of this pod"
# JWKS fetches of the door's issuers: small documents, rarely fetched.
_JWKS_CONNECT_TIMEOUT_S = 5.0
_JWKS_KEEPALIVE_S = 30.0


class TokenVerifier:
    """The door of every agent-facing route: who the request is from (an agent's static token,
    every digest compared, or its JWT) and, where the pod reads one, whose end user."""

    def __init__(self, build: Build) -> None:
        self._digests = [
            (bytes.fromhex(agent.agent.token_sha256), agent) for agent in build.agents.values()
        ]
        self._agents = build.agents
        identity, end_users = build.config.identity, build.config.end_users
        issuers = [i for i in (identity, end_users) if i is not None]
        self._client = (
            HttpClient(keepalive_s=_JWKS_KEEPALIVE_S, connect_timeout_s=_JWKS_CONNECT_TIMEOUT_S)
            if any(i.jwks_url for i in issuers)
            else None
        )
        keys = key_sets(issuers, self._client)
        self.agent_tokens = (
            JwtVerifier(identity, keys[id(identity)]) if identity is not None else None
        )
        self.end_users = (
            EndUserVerifier(end_users, keys[id(end_users)], self._agents)
            if end_users is not None
            else None
        )

    def authenticate(self, headers: Mapping[str, str]) -> AgentBuild:
        """The agent whose static token the request presents (for a caller that only names the
        kind of token it was given: the operator API, the console's sign-in)."""
        match = self._static(presented_token(headers))
        if match is None:
            raise AuthError(403, NOT_AN_AGENT)
        return match

    async def identify(
        self, headers: Mapping[str, str]
    ) -> tuple[AgentBuild, EndUser | None, AuthKind | None]:
        """The agent a request is from, the end user it is for (None: no end-user header, or a
        pod that reads none) and, in a pod with ``identity``, how the agent proved who it is.
        Raises ``AuthError``."""
        token = presented_token(headers)
        agent = self._static(token)
        auth: AuthKind | None = None if self.agent_tokens is None else "token"
        if agent is None:
            if self.agent_tokens is None or token.count(".") != 2:
                raise AuthError(403, NOT_AN_AGENT)
            agent, auth = await self._agent_of_jwt(self.agent_tokens, token), "jwt"
        if self.end_users is None:
            return agent, None, auth
        try:
            return agent, await self.end_users.verify(headers, agent.agent.id), auth
        except TokenRejected as exc:
            raise AuthError(
                403, f"end user token refused: {exc}", "invalid_end_user_token"
            ) from None

    def _static(self, token: str) -> AgentBuild | None:
        digest = hashlib.sha256(token.encode()).digest()
        match: AgentBuild | None = None
        # No early exit: the time taken must not depend on which agent (if any) matched.
        for expected, agent in self._digests:
            if hmac.compare_digest(digest, expected):
                match = agent
        return match

    async def _agent_of_jwt(self, verifier: JwtVerifier, token: str) -> AgentBuild:
        try:
            verified = await verifier.verify(token)
        except TokenRejected as exc:
            raise AuthError(403, f"agent token refused: {exc}") from None
        agent = self._agents.get(verified.subject)
        if agent is None:
            claim = verifier.issuer.claim
            raise AuthError(403, f"the token's {claim!r} claim names no agent of this pod")
        return agent

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def presented_token(headers: Mapping[str, str]) -> str:
    """The token from ``Authorization: Bearer`` or ``x-api-key``; 401 if absent or malformed
    (tokens are printable ASCII: a header that was not UTF-8 arrives with surrogates)."""
    authorization = headers.get("Authorization")
    if authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not _well_formed(token):
            raise AuthError(401, "malformed Authorization header: expected 'Bearer <token>'")
        return token
    api_key = headers.get("x-api-key")
    if api_key is not None:
        api_key = api_key.strip()
        if not _well_formed(api_key):
            raise AuthError(401, "malformed x-api-key header")
        return api_key
    raise AuthError(401, "missing agent token: send 'Authorization: Bearer <token>' or 'x-api-key'")


def _well_formed(token: str) -> bool:
    return bool(token) and token.isascii() and token.isprintable() and " " not in token


log = logging.getLogger(__name__)
JSONRPC_INTERNAL_ERROR = -32603
_JSON_HEADERS = {"Content-Type": "application/json"}
# Connections looked at, oldest first, for one to close at the cap: a flood of new connections
# costs a bounded scan each, even when the oldest are all busy.
EVICTION_SCAN = 64
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DirectRoutes = dict[tuple[str, str], Handler]
# (method, path as the router matches it) -> the handler, which shapes its own errors and
# needs no route parameters, no middleware and no response signal.
DIRECT_ROUTES: web.AppKey[DirectRoutes] = web.AppKey("claw_direct_routes", dict)


@dataclass(frozen=True)
class EdgeLimits:
    max_connections: int = 4096
    max_connections_per_peer: int = 1024
    head_timeout_s: float = 10.0
    body_idle_timeout_s: float = 30.0
    keepalive_timeout_s: float = 75.0
    max_head_bytes: int = 64 * 1024
    max_line_bytes: int = 8190  # the request line; aiohttp's default
    max_field_bytes: int = 8190  # one header line; aiohttp's default
    max_headers: int = 128
    lingering_s: float = 10.0  # an unread body is read and dropped this long before the close

    @classmethod
    def from_config(cls, config: SidecarConfig) -> EdgeLimits:
        """The limits a build sets (``x-claw.edge`` in the pod file)."""
        edge = config.edge or EdgeConfig()
        return cls(
            max_connections=config.max_connections,
            max_connections_per_peer=edge.max_connections_per_peer,
            head_timeout_s=edge.head_timeout_ms / 1000,
            body_idle_timeout_s=edge.body_idle_timeout_ms / 1000,
            keepalive_timeout_s=edge.keepalive_timeout_ms / 1000,
        )

    def handler_options(self) -> dict[str, Any]:
        """aiohttp's own per-connection limits."""
        return {
            "keepalive_timeout": self.keepalive_timeout_s,
            "lingering_time": self.lingering_s,
            "max_line_size": self.max_line_bytes,
            "max_field_size": self.max_field_bytes,
            "max_headers": self.max_headers,
        }


class EdgeServer(ServerBase):
    """aiohttp's low-level server whose connections are ``EdgeConnection``s, counted in all
    and per peer address."""

    def __init__(
        self, handler: Handler, *args: Any, limits: EdgeLimits, direct: DirectRoutes, **kwargs: Any
    ) -> None:
        super().__init__(handler, *args, **kwargs, **limits.handler_options())
        self.limits = limits
        self._application = handler
        self._direct = direct
        if direct:
            self.request_handler = self._dispatch
        self.open_connections = 0  # not counting those closed to make room, already gone
        self._per_peer: Counter[str] = Counter()
        # Connections that never carried an authenticated request, least recently active first.
        self._strangers: OrderedDict[EdgeConnection, None] = OrderedDict()

    def __call__(self) -> EdgeConnection:
        return EdgeConnection(self, loop=self.event_loop, **self.connection_options)

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        """A direct route's request to its handler, unless the edge refuses it or the client
        expects a 100 Continue (the application does both)."""
        handler = self._direct.get((request.method, request.rel_url.path_safe))
        if handler is None or refusal(request) is not None or hdrs.EXPECT in request.headers:
            return await self._application(request)
        assert isinstance(request, web.Request)  # the application's request factory made it
        return await handler(request)

    def admit(self, connection: EdgeConnection) -> bool:
        """Count a new connection in; whether it is over capacity (all, or its peer's)."""
        limits = self.limits
        peer = connection.peer or ""
        over = self._per_peer[peer] >= limits.max_connections_per_peer or (
            self.open_connections >= limits.max_connections and not self._make_room()
        )
        self.open_connections += 1
        self._per_peer[peer] += 1
        self._strangers[connection] = None
        return over

    def active(self, connection: EdgeConnection) -> None:
        """A stranger began a request: the last to be closed to make room."""
        if connection in self._strangers:
            self._strangers.move_to_end(connection)

    def trusted(self, connection: EdgeConnection) -> None:
        """The connection carried an authenticated request: never closed to make room."""
        self._strangers.pop(connection, None)

    def forget(self, connection: EdgeConnection, peer: str) -> None:
        self._strangers.pop(connection, None)
        if not connection.evicted:
            self.open_connections -= 1
        self._per_peer[peer] -= 1
        if not self._per_peer[peer]:
            del self._per_peer[peer]

    def _make_room(self) -> bool:
        """Close the stranger idle longest (sent no head yet, or between requests)."""
        for scanned, connection in enumerate(self._strangers):
            if scanned >= EVICTION_SCAN:
                break
            if connection.idle:
                del self._strangers[connection]
                connection.evict()
                self.open_connections -= 1
                return True
        return False


class EdgeConnection(HandlerBase):
    """One client connection: aiohttp's request handler plus the edge's deadlines."""

    def __init__(self, manager: EdgeServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.server = manager  # kept past connection_lost, which clears aiohttp's own
        self.limits = manager.limits
        self.over_capacity = False
        self.evicted = False
        self.peer: str | None = None  # the client's address while the connection is counted
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None  # the request body still arriving, if any
        self._body_seen = 0.0  # loop time of the body's last bytes
        self._body_timer: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> bool:
        """No request is being read or answered: closing it loses nothing."""
        return not (self.request_in_progress or self.queued_requests or self._body is not None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        address = transport.get_extra_info("peername")
        self.peer = str(address[0]) if isinstance(address, tuple) else ""
        self.over_capacity = self.server.admit(self)
        super().connection_made(transport)
        # A head within the head deadline, or the slot is freed: no keep-alive idle time for
        # a connection that has asked nothing yet.
        self._arm_head_timer()

    def evict(self) -> None:
        """Closed to make room for a new connection at the cap."""
        self.evicted = True
        self.force_close()

    def data_received(self, data: bytes) -> None:
        reading_head = self._body is None
        parsed_before = self.requests_parsed
        super().data_received(data)
        if self.transport is None:
            return
        if self.requests_parsed > parsed_before:  # aiohttp completed a head (or more)
            self._head_done()
            self.server.active(self)
            queued = self.queued_requests
            payload = queued[-1][1] if queued else None
            if isinstance(payload, StreamReader) and not payload.is_eof():
                self._watch_body(payload)
        elif reading_head and data:
            # (aiohttp's resume_reading, on every body read, passes b"": no head byte came,
            # so no head deadline starts there)
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_head_bytes:
                self.force_close()
                return
            if self._head_timer is None:
                self._arm_head_timer()
        if self._body is not None:
            self._body_seen = self.event_loop.time()
            if self._body.is_eof():
                self._body_done()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._head_done()
        self._body_done()
        if self.peer is not None:
            self.server.forget(self, self.peer)
            self.peer = None  # counted out once
        super().connection_lost(exc)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A request aiohttp could not parse (or a failure no middleware caught): a JSON error
        both SDKs read (OpenAI's ``error`` object inside Anthropic's envelope), then a close.
        Neither the offending bytes nor a traceback are echoed or logged."""
        if request.writer.output_size > 0:
            raise ConnectionError("the response was already started")
        reason = type(exc).__name__ if exc is not None else "error"
        if status >= 500:
            log.error("unhandled failure on a request: %s", reason)
            err = internal_error()
        else:
            log.info("refused a malformed request: %s", reason)
            message = f"malformed HTTP request ({reason})"
            err = ApiError(status, "bad_request", message, "invalid_request_error")
        error = {"type": err.type, "code": err.code, "message": err.message}
        body = {"type": "error", "error": error}
        response = web.Response(
            status=status, body=orjson.dumps(body), content_type="application/json"
        )
        response.force_close()
        return response

    def _arm_head_timer(self) -> None:
        self._head_timer = self.event_loop.call_later(self.limits.head_timeout_s, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self.queued_requests or self.request_in_progress:
            # A head pipelined behind a request still being answered: its time runs from the
            # moment the connection is free again.
            self._arm_head_timer()
            return
        self.force_close()

    def _head_done(self) -> None:
        self._head_bytes = 0
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _watch_body(self, payload: StreamReader) -> None:
        self._body_done()
        self._body = payload
        self._body_seen = self.event_loop.time()
        self._arm_body_timer()

    def _arm_body_timer(self) -> None:
        deadline = self._body_seen + self.limits.body_idle_timeout_s
        self._body_timer = self.event_loop.call_at(deadline, self._body_idle)

    def _body_idle(self) -> None:
        self._body_timer = None
        body = self._body
        if body is None or body.is_eof():
            self._body = None
            return
        if any(self.pause_flags):
            self._body_seen = self.event_loop.time()  # the sidecar stopped reading, not the client
        elif self.event_loop.time() - self._body_seen >= self.limits.body_idle_timeout_s:
            self.force_close()
            return
        self._arm_body_timer()

    def _body_done(self) -> None:
        self._body = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None


def _head_size(raw_headers: tuple[tuple[bytes, bytes], ...]) -> int:
    """Bytes in a parsed head's fields, as sent ("name: value\r\n")."""
    return sum(len(name) + len(value) + 4 for name, value in raw_headers)


class EdgeRunner(RunnerBase):
    """An ``AppRunner`` whose server is an ``EdgeServer``; it refuses to start on an aiohttp
    whose internals the edge cannot use."""

    def __init__(
        self, app: web.Application, *, limits: EdgeLimits, shutdown_timeout: float
    ) -> None:
        check()
        super().__init__(app, access_log=None, shutdown_timeout=shutdown_timeout)
        self._limits = limits

    def wrap_server(self, plain: web.Server) -> web.Server:
        return EdgeServer(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            limits=self._limits,
            direct=self.app.get(DIRECT_ROUTES, {}),
            access_log=None,
        )


CLOSING_STATUSES = frozenset({413, 431})  # the rest of the request will not be read


def over_capacity(request: web.BaseRequest) -> bool:
    return getattr(request.protocol, "over_capacity", False)


def mark_authenticated(request: web.BaseRequest) -> None:
    """The request's token matched an agent: its connection is never closed to make room."""
    connection = request.protocol
    if isinstance(connection, EdgeConnection) and connection.transport is not None:
        connection.server.trusted(connection)


def refusal(request: web.BaseRequest) -> web.HTTPException | None:
    """Why the edge refuses a request aiohttp parsed, or None. Past the connection cap: 503,
    which SDKs show and retry with backoff, where a bare close reads as a network failure."""
    if over_capacity(request):
        return web.HTTPServiceUnavailable(
            reason="too many connections to the sidecar; retry shortly"
        )
    limits = getattr(request.protocol, "limits", None)
    if limits is not None and _head_size(request.raw_headers) > limits.max_head_bytes:
        return web.HTTPRequestHeaderFieldsTooLarge(
            reason=f"the request's header fields exceed {limits.max_head_bytes} bytes"
        )
    if request.version >= (1, 1) and "Host" not in request.headers:
        return web.HTTPBadRequest(reason="an HTTP/1.1 request needs a Host header")
    return None


@web.middleware
async def refuse_at_the_edge(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The edge's refusals; ``protocol_errors`` (outside this one) shapes each in the caller's
    protocol, and ``close_when_refused`` then ends the connection."""
    refused = refusal(request)
    if refused is not None:
        raise refused
    return await handler(request)


def close_if_refused(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """Before a response's head is built: an over-capacity connection, and a request whose
    rest will not be read, end with the answer (``Connection: close``)."""
    if over_capacity(request) or response.status in CLOSING_STATUSES:
        response.force_close()
        response.headers["Connection"] = "close"


async def close_when_refused(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """``on_response_prepare`` (a direct route's handler calls ``close_if_refused`` itself)."""
    close_if_refused(request, response)


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
        return _error_reply(request, internal_error())


def _error_reply(request: web.Request, err: ApiError) -> web.Response:
    if request.path == "/mcp":
        return jsonrpc_error(err.status, JSONRPC_INTERNAL_ERROR, err.message)
    codec = codec_for_caller(request.path, request.headers)
    return web.Response(status=err.status, body=codec.error_json(err), headers=_JSON_HEADERS)


def _from_http_exception(exc: web.HTTPException) -> ApiError:
    codes = {
        400: "bad_request",
        404: "not_found",
        405: "method_not_allowed",
        413: "request_too_large",
        431: "request_header_fields_too_large",
        503: "overloaded",
    }
    message = {
        404: "no such route",
        405: "method not allowed on this route",
    }.get(exc.status, exc.reason)
    return ApiError(exc.status, codes.get(exc.status, f"http_{exc.status}"), message)
