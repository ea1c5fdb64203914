"""The inbound edge: aiohttp's HTTP/1.1 server with the bounds it lacks.

aiohttp parses every request (line, field and header-count limits, chunked framing, pipelining
with a bounded queue and backpressure). This module adds, per connection:

- a request-head deadline: once a byte of a head has arrived, the whole head must arrive within
  ``head_timeout_s`` (and an over-capacity connection must send its head that fast after
  connecting), else the connection is closed;
- a head-size bound over all its fields together (aiohttp bounds each field, not their sum):
  while a head arrives (close) and once it is parsed (431);
- a body-idle deadline: a request body that stops arriving for ``body_idle_timeout_s`` closes
  the connection (time the sidecar itself stopped reading, for backpressure, does not count);
- a cap on open connections: past it, a connection's first request is answered 503 in the
  caller's protocol with ``Connection: close`` (see ``refuse_over_capacity``);
- parse failures answered as JSON, not aiohttp's text page with a logged traceback.
Nothing here parses HTTP: it counts bytes and watches aiohttp's own queue of parsed requests.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("sidecar.edge")


@dataclass(frozen=True)
class EdgeLimits:
    max_connections: int = 4096
    head_timeout_s: float = 10.0
    body_idle_timeout_s: float = 30.0
    keepalive_timeout_s: float = 75.0
    max_head_bytes: int = 64 * 1024
    max_line_bytes: int = 8190  # the request line; aiohttp's default
    max_field_bytes: int = 8190  # one header line; aiohttp's default
    max_headers: int = 128
    lingering_s: float = 10.0  # an unread body is read and dropped this long before the close

    def handler_options(self) -> dict[str, Any]:
        """aiohttp's own per-connection limits."""
        return {
            "keepalive_timeout": self.keepalive_timeout_s,
            "lingering_time": self.lingering_s,
            "max_line_size": self.max_line_bytes,
            "max_field_size": self.max_field_bytes,
            "max_headers": self.max_headers,
        }


class EdgeServer(web.Server):
    """aiohttp's low-level server whose connections are ``EdgeConnection``s, counted."""

    def __init__(self, *args: Any, limits: EdgeLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs, **limits.handler_options())
        self.limits = limits
        self.open_connections = 0

    def __call__(self) -> EdgeConnection:
        return EdgeConnection(self, loop=self._loop, **self._kwargs)

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        self.open_connections += 1
        super().connection_made(handler, transport)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self.open_connections -= 1
        super().connection_lost(handler, exc)


class EdgeConnection(RequestHandler):
    """One client connection: aiohttp's request handler plus the edge's deadlines."""

    def __init__(self, manager: EdgeServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.limits = manager.limits
        self.over_capacity = False
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None  # the request body still arriving, if any
        self._body_seen = 0.0  # loop time of the body's last bytes
        self._body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        manager = self._manager
        assert isinstance(manager, EdgeServer)
        # Counted before this one registers: the (cap + 1)th connection is over capacity.
        self.over_capacity = manager.open_connections >= self.limits.max_connections
        super().connection_made(transport)
        if self.over_capacity:
            self._arm_head_timer()  # it gets no keep-alive idle time: a head, now, or nothing

    def data_received(self, data: bytes) -> None:
        reading_head = self._body is None
        parsed_before = self._request_count
        super().data_received(data)
        if self.transport is None:
            return
        if self._request_count > parsed_before:  # aiohttp completed a head (or more)
            self._head_done()
            payload = self._messages[-1][1] if self._messages else None
            if isinstance(payload, StreamReader) and not payload.is_eof():
                self._watch_body(payload)
        elif reading_head:
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_head_bytes:
                self.force_close()
                return
            if self._head_timer is None:
                self._arm_head_timer()
        if self._body is not None:
            self._body_seen = self._loop.time()
            if self._body.is_eof():
                self._body_done()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._head_done()
        self._body_done()
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
            code, text = "internal_error", "the sidecar failed on this request"
        else:
            log.info("refused a malformed request: %s", reason)
            code, text = "bad_request", f"malformed HTTP request ({reason})"
        error_type = "api_error" if status >= 500 else "invalid_request_error"
        body = {"type": "error", "error": {"type": error_type, "code": code, "message": text}}
        response = web.Response(
            status=status, body=orjson.dumps(body), content_type="application/json"
        )
        response.force_close()
        return response

    def _arm_head_timer(self) -> None:
        self._head_timer = self._loop.call_later(self.limits.head_timeout_s, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self._messages or self._request_in_progress:
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
        self._body_seen = self._loop.time()
        self._arm_body_timer()

    def _arm_body_timer(self) -> None:
        deadline = self._body_seen + self.limits.body_idle_timeout_s
        self._body_timer = self._loop.call_at(deadline, self._body_idle)

    def _body_idle(self) -> None:
        self._body_timer = None
        body = self._body
        if body is None or body.is_eof():
            self._body = None
            return
        if self._reading_paused or self._buffer_paused:
            self._body_seen = self._loop.time()  # the sidecar stopped reading, not the client
        elif self._loop.time() - self._body_seen >= self.limits.body_idle_timeout_s:
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


class EdgeRunner(web.AppRunner):
    """An ``AppRunner`` whose server is an ``EdgeServer``."""

    def __init__(
        self, app: web.Application, *, limits: EdgeLimits, shutdown_timeout: float
    ) -> None:
        super().__init__(app, access_log=None, shutdown_timeout=shutdown_timeout)
        self._limits = limits

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()  # runs the app's start-up hooks and freezes it
        return EdgeServer(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            limits=self._limits,
            access_log=None,
        )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


CLOSING_STATUSES = frozenset({413, 431})  # the rest of the request will not be read


def over_capacity(request: web.BaseRequest) -> bool:
    return getattr(request.protocol, "over_capacity", False)


@web.middleware
async def refuse_at_the_edge(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Requests aiohttp parsed but the edge refuses; the error middleware (outside this one)
    shapes each refusal in the caller's protocol.

    Past the connection cap: 503, which SDKs show and retry with backoff, where a bare close
    reads as a network failure; ``close_when_refused`` then ends the connection."""
    if over_capacity(request):
        raise web.HTTPServiceUnavailable(
            reason="too many connections to the sidecar; retry shortly"
        )
    limits = getattr(request.protocol, "limits", None)
    if limits is not None and _head_size(request.raw_headers) > limits.max_head_bytes:
        raise web.HTTPRequestHeaderFieldsTooLarge(
            reason=f"the request's header fields exceed {limits.max_head_bytes} bytes"
        )
    if request.version >= (1, 1) and "Host" not in request.headers:
        raise web.HTTPBadRequest(reason="an HTTP/1.1 request needs a Host header")
    return await handler(request)


async def close_when_refused(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """``on_response_prepare``: an over-capacity connection, and a request whose rest will not
    be read, end with the answer: ``Connection: close``."""
    if over_capacity(request) or response.status in CLOSING_STATUSES:
        response.force_close()
        response.headers["Connection"] = "close"  # the head is built before this hook runs
