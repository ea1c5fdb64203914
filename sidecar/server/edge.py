"""The inbound edge: aiohttp's HTTP/1.1 server with the bounds it lacks.

aiohttp parses every request (line, field and header-count limits, chunked framing, pipelining
with a bounded queue and backpressure). This module adds, per connection:

- a request-head deadline: once a byte of a head has arrived, the whole head must arrive within
  ``head_timeout_s`` (and an over-capacity connection must send its head that fast after
  connecting), else the connection is closed;
- a head-size bound over all its fields together (aiohttp bounds each field, not their sum);
- a body-idle deadline: a request body that stops arriving for ``body_idle_timeout_s`` closes
  the connection (time the sidecar itself stopped reading, for backpressure, does not count);
- a cap on open connections: past it, a connection's first request is answered 503 in the
  caller's protocol with ``Connection: close`` (see ``refuse_over_capacity``).
Nothing here parses HTTP: it counts bytes and watches aiohttp's own queue of parsed requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler


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

    def handler_options(self) -> dict[str, Any]:
        """aiohttp's own per-connection limits."""
        return {
            "keepalive_timeout": self.keepalive_timeout_s,
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
        self._limits = manager.limits
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
        self.over_capacity = manager.open_connections >= self._limits.max_connections
        super().connection_made(transport)
        if self.over_capacity:
            self._arm_head_timer()  # it gets no keep-alive idle time: a head, now, or nothing

    def data_received(self, data: bytes) -> None:
        reading_head = self._body is None
        parsed_before = self._request_count
        super().data_received(data)
        if self.transport is None:
            return
        if self._request_count > parsed_before:  # aiohttp completed a head
            self._head_done()
            payload = self._messages[-1][1] if self._messages else None
            if isinstance(payload, StreamReader) and not payload.is_eof():
                self._watch_body(payload)
        elif reading_head:
            self._head_bytes += len(data)
            if self._head_bytes > self._limits.max_head_bytes:
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

    def _arm_head_timer(self) -> None:
        self._head_timer = self._loop.call_later(self._limits.head_timeout_s, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if not self._messages and not self._request_in_progress:
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
        deadline = self._body_seen + self._limits.body_idle_timeout_s
        self._body_timer = self._loop.call_at(deadline, self._body_idle)

    def _body_idle(self) -> None:
        self._body_timer = None
        body = self._body
        if body is None or body.is_eof():
            self._body = None
            return
        if self._reading_paused or self._buffer_paused:
            self._body_seen = self._loop.time()  # the sidecar stopped reading, not the client
        elif self._loop.time() - self._body_seen >= self._limits.body_idle_timeout_s:
            self.force_close()
            return
        self._arm_body_timer()

    def _body_done(self) -> None:
        self._body = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None


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


def over_capacity(request: web.BaseRequest) -> bool:
    return getattr(request.protocol, "over_capacity", False)


@web.middleware
async def refuse_over_capacity(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Past the connection cap a request gets 503 (the error middleware shapes it in the
    caller's protocol): SDKs show the reason and retry with backoff, where a bare close reads
    as a network failure. ``close_over_capacity`` then ends the connection."""
    if over_capacity(request):
        raise web.HTTPServiceUnavailable(
            reason="too many connections to the sidecar; retry shortly"
        )
    if request.version >= (1, 1) and "Host" not in request.headers:
        raise web.HTTPBadRequest(reason="an HTTP/1.1 request needs a Host header")
    return await handler(request)


async def close_over_capacity(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """``on_response_prepare``: an over-capacity connection says ``Connection: close``."""
    if over_capacity(request):
        response.force_close()
