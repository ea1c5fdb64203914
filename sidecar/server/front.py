"""The sidecar's listening socket: LLM requests on a lean HTTP/1.1 protocol, the rest on aiohttp.

aiohttp's server path (request and response objects, router, middleware) cost about a quarter
of a pass-through request's CPU (``bench/README.md``), and the LLM routes are the hot path. So
every connection starts on ``FrontConnection``: httptools (llhttp) parses it, and a ``POST`` to
an LLM route is served right here through ``NativeExchange``. The first request for anything
else hands the connection to aiohttp for good: the request's raw bytes are replayed into an
aiohttp protocol, which serves every route of the app (the LLM routes too, through the same
``serve_llm``), so behaviour never depends on which side took a connection.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, cast

import httptools
from clawpod.sidecar.server.errors import JSON_HEADERS, ApiError, error_json
from clawpod.sidecar.server.exchange import Exchange, ResponseHeaders, too_large
from clawpod.sidecar.transport import Headers

if TYPE_CHECKING:
    from clawpod.sidecar.server.app import LlmRoute

# Bounds on what one request head may hold, like aiohttp's parser (its line limit is 8 KiB).
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 128
KEEPALIVE_S = 75.0  # idle keep-alive connections are closed after this long (aiohttp's default)

ServeLlm = Callable[[Exchange, "LlmRoute"], Awaitable[None]]


class _HandOff(Exception):
    """Raised from a parser callback: this request is not ours, stop parsing."""


class _HeadTooLarge(Exception):
    pass


class FrontDoor:
    """The protocol factory of the listening socket, and what shutdown needs to find."""

    def __init__(
        self,
        serve: ServeLlm,
        routes: Mapping[str, LlmRoute],
        fallback: Callable[[], asyncio.Protocol],
        *,
        max_body_bytes: int,
    ) -> None:
        self.serve = serve
        self.routes = {path.encode(): route for path, route in routes.items()}
        self.fallback = fallback  # a new aiohttp protocol, for a connection handed over
        self.max_body_bytes = max_body_bytes
        self.connections: set[FrontConnection] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    def __call__(self) -> FrontConnection:
        return FrontConnection(self)

    async def shutdown(self, timeout_s: float) -> None:
        """Close idle connections, let requests in progress finish (up to ``timeout_s``), then
        close what is left."""
        for connection in list(self.connections):
            connection.close_when_idle()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=timeout_s)
        for connection in list(self.connections):
            connection.abort()


class FrontConnection(asyncio.Protocol):
    """One client connection, until it is closed or handed to aiohttp."""

    __slots__ = (
        "_chunk",
        "_drain_waiters",
        "_exchange",
        "_front",
        "_handoff",
        "_head_size",
        "_headers",
        "_idle_timer",
        "_last_active",
        "_loop",
        "_lost",
        "_message_done_in_chunk",
        "_owed",
        "_parser",
        "_raw",
        "_stop_when_idle",
        "_url",
        "_write_paused",
        "transport",
    )

    def __init__(self, front: FrontDoor) -> None:
        self._front = front
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._chunk = b""
        self._message_done_in_chunk = False
        # The raw bytes of the request being parsed, kept until its route is known, so that a
        # request for aiohttp can be replayed to it as it came. None when the request did not
        # start a chunk (pipelined behind another): its first byte cannot be found then.
        self._raw: list[bytes] | None = None
        self._url = b""
        self._headers: list[tuple[str, str]] = []
        self._head_size = 0
        self._exchange: NativeExchange | None = None  # whose body is being received
        self._owed: deque[NativeExchange] = deque()  # responses to send, in request order
        self._handoff: list[bytes] | None = None  # bytes for aiohttp once nothing is owed
        self._stop_when_idle = False
        self._lost = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._last_active = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's does not subclass it
        self._front.connections.add(self)
        self._last_active = self._loop.time()
        self._idle_timer = self._loop.call_later(KEEPALIVE_S, self._check_idle)

    def data_received(self, data: bytes) -> None:
        self._last_active = self._loop.time()
        if self._handoff is not None:  # arrived before reading paused: aiohttp's too
            self._handoff.append(data)
            return
        if self._raw is not None:
            self._raw.append(data)
        self._chunk = data
        self._message_done_in_chunk = False
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _HandOff):
                self._hand_off()
            elif isinstance(exc.__context__, _HeadTooLarge):
                self._refuse(431, "request_header_fields_too_large", "request head too large")
            else:
                raise
        except httptools.HttpParserError as exc:
            self._refuse(400, "bad_request", f"malformed HTTP request: {exc}")

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writers(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._front.connections.discard(self)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        for exchange in self._owed:
            exchange.connection_lost()
        self._wake_writers(_client_closed())

    # --- httptools callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._head_size = 0
        self._raw = None if self._message_done_in_chunk else [self._chunk]

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._grow_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))
        self._grow_head(len(name) + len(value))
        if len(self._headers) > MAX_HEADERS:
            raise _HeadTooLarge

    def on_headers_complete(self) -> None:
        parser = self._parser
        path = self._url.partition(b"?")[0]
        route = self._front.routes.get(path) if parser.get_method() == b"POST" else None
        if route is None or parser.should_upgrade():
            raise _HandOff
        self._raw = None
        http10 = parser.get_http_version() == "1.0"
        exchange = NativeExchange(
            self,
            path.decode("latin-1"),
            Headers(self._headers),
            keep_alive=parser.should_keep_alive() and not http10,
            http10=http10,
        )
        self._exchange = exchange
        self._owed.append(exchange)
        exchange.check_declared_length(self._front.max_body_bytes, may_answer=len(self._owed) == 1)
        task = self._loop.create_task(self._front.serve(exchange, route))
        self._front.tasks.add(task)
        task.add_done_callback(functools.partial(self._served, exchange))

    def on_body(self, body: bytes) -> None:
        if self._exchange is not None:
            self._exchange.feed(body, self._front.max_body_bytes)

    def on_message_complete(self) -> None:
        self._message_done_in_chunk = True
        if self._exchange is not None:
            self._exchange.body_complete()
            self._exchange = None

    # --- response order, hand-off, closing -----------------------------------------------

    def may_write(self, exchange: NativeExchange) -> bool:
        return bool(self._owed) and self._owed[0] is exchange

    def finished(self, exchange: NativeExchange) -> None:
        """``exchange``'s response is complete: the next one may write, or the connection
        moves on (hand-off, close)."""
        if not self._owed or self._owed[0] is not exchange:
            return
        self._owed.popleft()
        self._last_active = self._loop.time()
        if not exchange.keep_alive:
            self._stop_when_idle = True
        if self._owed:
            self._owed[0].your_turn()
        elif self._handoff is not None:
            self._complete_hand_off()
        elif self._stop_when_idle and self.transport is not None:
            self.transport.close()

    def _served(self, exchange: NativeExchange, task: asyncio.Task[None]) -> None:
        """The route's handler returned: a response it left unfinished ends the connection."""
        self._front.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # serve_llm answers every error itself; this is a bug, keep it visible.
            self._loop.call_exception_handler(
                {"message": "LLM route handler failed", "exception": task.exception()}
            )
        if not exchange.response_done:
            exchange.keep_alive = False
            exchange.response_done = True
            self.abort()
            self.finished(exchange)

    def close_when_idle(self) -> None:
        self._stop_when_idle = True
        if not self._owed and self._exchange is None and self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _hand_off(self) -> None:
        assert self.transport is not None
        self.transport.pause_reading()
        if self._raw is None:
            # A pipelined request for aiohttp: where it starts is unknown, so the connection
            # ends after the answers owed; the client sends it again on a new one.
            self.close_when_idle()
            return
        self._handoff, self._raw = self._raw, None
        if not self._owed:
            self._complete_hand_off()

    def _complete_hand_off(self) -> None:
        transport, data = self.transport, b"".join(self._handoff or ())
        self._handoff = None
        self._front.connections.discard(self)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if transport is None or transport.is_closing():
            return
        protocol = self._front.fallback()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.data_received(data)
        transport.resume_reading()

    def _refuse(self, status: int, code: str, message: str) -> None:
        """A request that cannot be parsed: answer it when nothing else is owed, then close."""
        assert self.transport is not None
        self.transport.pause_reading()
        if self._owed:
            self.close_when_idle()
            return
        # No route is known yet: OpenAI's shape, the one for paths of no protocol.
        body = error_json("openai", ApiError(status, code, message, "invalid_request_error"))
        length = f"Content-Length: {len(body)}\r\n"
        self.transport.write(_response_head(status, JSON_HEADERS, length, close=True) + body)
        self.transport.close()

    def _grow_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > MAX_HEAD_BYTES:
            raise _HeadTooLarge

    def _check_idle(self) -> None:
        if self._lost:
            return
        idle_for = self._loop.time() - self._last_active
        if self._owed:  # a request is being served: not idle
            idle_for = 0.0
        elif idle_for >= KEEPALIVE_S and self.transport is not None:
            self.transport.close()
            return
        self._idle_timer = self._loop.call_later(KEEPALIVE_S - idle_for, self._check_idle)

    # --- writing ----------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.lost:
            raise _client_closed()
        self.transport.write(data)  # type: ignore[union-attr]  # not lost: connected

    async def drain(self) -> None:
        if not self._write_paused:
            return
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def _wake_writers(self, exc: Exception | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            _settle(waiter, exc)

    @property
    def lost(self) -> bool:
        return self._lost or self.transport is None or self.transport.is_closing()


class NativeExchange(Exchange):
    """A request to an LLM route on a front connection: its body as it arrives, its response
    rendered straight onto the socket."""

    __slots__ = (
        "_body",
        "_body_size",
        "_body_waiter",
        "_complete",
        "_connection",
        "_too_large",
        "_turn",
        "chunked",
        "headers",
        "http10",
        "keep_alive",
        "path",
        "response_done",
        "response_started",
    )

    def __init__(
        self,
        connection: FrontConnection,
        path: str,
        headers: Headers,
        *,
        keep_alive: bool,
        http10: bool,
    ) -> None:
        self._connection = connection
        self.path = path
        self.headers = headers
        self.keep_alive = keep_alive
        self.http10 = http10
        self._body: list[bytes] = []
        self._body_size = 0
        self._complete = False
        self._too_large = False
        self._body_waiter: asyncio.Future[None] | None = None
        self._turn: asyncio.Future[None] | None = None
        self.chunked = False
        self.response_started = False
        self.response_done = False

    # --- the request body, fed by the connection --------------------------------------------

    def check_declared_length(self, limit: int, *, may_answer: bool) -> None:
        """Refuse a declared body over ``limit`` before it arrives; invite one that is awaited
        (``Expect: 100-continue``) when nothing else is owed on the connection."""
        declared = self.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            self._too_large = True
            self.keep_alive = False  # the rest of the body is not worth reading
        elif may_answer and (self.headers.get("Expect") or "").lower() == "100-continue":
            self._connection.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def feed(self, data: bytes, limit: int) -> None:
        if self._too_large:
            return
        self._body_size += len(data)
        if self._body_size > limit:
            self._too_large, self._body = True, []
            self.keep_alive = False
            return
        self._body.append(data)

    def body_complete(self) -> None:
        self._complete = True
        self._wake_reader(None)

    def connection_lost(self) -> None:
        gone = _client_closed()
        self._wake_reader(gone)
        _settle(self._turn, gone)

    def your_turn(self) -> None:
        _settle(self._turn, None)

    def _wake_reader(self, exc: Exception | None) -> None:
        waiter, self._body_waiter = self._body_waiter, None
        _settle(waiter, exc)

    # --- Exchange ---------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self.response_started

    async def read_body(self, limit: int) -> bytes:
        while not self._complete and not self._too_large:
            if self._connection.lost:
                raise _client_closed()
            self._body_waiter = asyncio.get_running_loop().create_future()
            await self._body_waiter
        if self._too_large or self._body_size > limit:
            raise too_large(limit)
        body = self._body
        return body[0] if len(body) == 1 else b"".join(body)

    def client_gone(self) -> bool:
        return self._connection.lost

    async def respond(self, status: int, body: bytes, headers: ResponseHeaders) -> None:
        await self._wait_turn()
        head = self._head(status, headers, f"Content-Length: {len(body)}\r\n")
        self.response_started = True
        self._connection.write(head + body)
        self._done()

    async def start_stream(self, status: int, headers: ResponseHeaders) -> None:
        await self._wait_turn()
        # An HTTP/1.0 client reads the body until the connection closes.
        self.chunked = not self.http10
        framing = "Transfer-Encoding: chunked\r\n" if self.chunked else ""
        self.response_started = True
        self._connection.write(self._head(status, headers, framing))

    async def write(self, data: bytes) -> None:
        if not data:
            return
        connection = self._connection
        connection.write(b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data)
        await connection.drain()

    async def end(self) -> None:
        if self.response_done:
            return
        if self.chunked:
            self._connection.write(b"0\r\n\r\n")
        self._done()

    def _done(self) -> None:
        self.response_done = True
        self._connection.finished(self)

    async def _wait_turn(self) -> None:
        connection = self._connection
        if connection.lost:
            raise _client_closed()
        if not connection.may_write(self):
            self._turn = asyncio.get_running_loop().create_future()
            await self._turn

    def _head(self, status: int, headers: ResponseHeaders, framing: str) -> bytes:
        return _response_head(status, headers, framing, close=not self.keep_alive)


def _response_head(status: int, headers: ResponseHeaders, framing: str, *, close: bool) -> bytes:
    """Status line, Date, ``headers``, the body's ``framing`` line and, when the connection
    ends after this response, ``Connection: close``."""
    reason = _REASONS.get(status, "Unknown")
    lines = [f"HTTP/1.1 {status} {reason}\r\nDate: {_http_date()}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in headers.items())
    lines.append(framing)
    if close:
        lines.append("Connection: close\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def _client_closed() -> ConnectionResetError:
    return ConnectionResetError("the client closed the connection")


def _settle(waiter: asyncio.Future[None] | None, exc: Exception | None) -> None:
    """Wake ``waiter``, if it still waits: with ``exc`` raised, or with nothing."""
    if waiter is None or waiter.done():
        return
    if exc is None:
        waiter.set_result(None)
    else:
        waiter.set_exception(exc)


_REASONS = {status.value: status.phrase for status in HTTPStatus}


_date_second = 0
_date_text = ""


def _http_date() -> str:
    """The Date header's value, formatted once per second."""
    global _date_second, _date_text
    now = int(time.time())
    if now != _date_second:
        _date_second, _date_text = now, email.utils.formatdate(now, usegmt=True)
    return _date_text
