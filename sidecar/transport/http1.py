"""One HTTP/1.1 client connection as an asyncio protocol, and the response read from it.

httptools (llhttp, the parser Node.js uses) does the framing: Content-Length, chunked and
close-delimited bodies. Body bytes are buffered per response and handed to the reader as they
arrive. Reading from the socket pauses while a slow reader leaves more than ``HIGH_WATER``
bytes unread, so a stream relayed to a slow client cannot grow memory without bound.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Iterator
from typing import Any, cast

import httptools

from clawpod.sidecar.transport.errors import (
    ConnectionClosed,
    InvalidResponse,
    Timeout,
    TransportError,
)

HIGH_WATER = 256 * 1024
# A timer can fire a little before its time (loop clock resolution).
_TIMER_SLACK_S = 0.001
# Window-bits values: 16+ expects a gzip wrapper, 32+ detects gzip or zlib.
_DECODER_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 32 + 15}


class Headers:
    """Response headers: the server's names and order (for relaying), case-insensitive lookup."""

    __slots__ = ("_items", "_lookup")

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        self._lookup: dict[str, str] | None = None

    def items(self) -> Iterator[tuple[str, str]]:
        return iter(self._items)

    def get(self, name: str, default: str | None = None) -> str | None:
        if self._lookup is None:
            lookup: dict[str, str] = {}
            for key, value in self._items:
                lower = key.lower()
                lookup[lower] = f"{lookup[lower]}, {value}" if lower in lookup else value
            self._lookup = lookup
        return self._lookup.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __len__(self) -> int:
        return len(self._items)


class Response:
    """The status, headers and body of one answer; the body is read with :meth:`read` or
    chunk by chunk with :meth:`read_chunk`. :meth:`release` must be called when done: it puts
    the connection back in the pool, or closes it if the body was not read to its end."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_connection",
        "_content_type",
        "_deadline",
        "_decoder",
        "_error",
        "_head_received",
        "_last_activity",
        "_loop",
        "_on_release",
        "_read_timeout_s",
        "_released",
        "_timer",
        "_waiter",
        "complete",
        "headers",
        "status",
    )

    def __init__(
        self,
        connection: Connection,
        on_release: Callable[[Connection, bool], None],
        *,
        deadline: float | None,
        read_timeout_s: float | None,
    ) -> None:
        self.status = 0
        self.headers = Headers([])
        self.complete = False
        self._content_type = ""
        self._connection = connection
        self._on_release = on_release
        self._loop = connection.loop
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._head_received = False
        self._error: TransportError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._decoder: Any = None  # a zlib decompressor when the body is compressed
        self._released = False
        self._deadline = deadline
        self._read_timeout_s = read_timeout_s
        self._last_activity = self._loop.time()
        self._timer: asyncio.TimerHandle | None = None
        self._arm_timer()

    # -- reading (the caller's side) ---------------------------------------------------------

    @property
    def content_type(self) -> str:
        """The media type without parameters, lower case; ``""`` when absent."""
        return self._content_type

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("content-length")
        return int(value) if value is not None and value.isdigit() else None

    async def read(self) -> bytes:
        """The whole (remaining) body."""
        while not self.complete:
            if self._error is not None:
                raise self._error
            await self._wait()
        return self._take()

    async def read_chunk(self) -> bytes:
        """The bytes that arrived since the last call, waiting for some; ``b""`` at the end."""
        while not self._chunks:
            if self.complete:
                return b""
            if self._error is not None:
                raise self._error
            await self._wait()
        return self._take()

    def release(self) -> None:
        """Return the connection to its pool if the response was read whole, else close it."""
        if self._released:
            return
        self._released = True
        self._cancel_timer()
        connection = self._connection
        connection.response = None
        self._on_release(connection, self.complete and connection.reusable)

    async def wait_head(self) -> None:
        while not self._head_received:
            if self._error is not None:
                raise self._error
            await self._wait()

    @property
    def nothing_received(self) -> bool:
        return not self._head_received and not self._chunks

    async def _wait(self) -> None:
        connection = self._connection
        if connection.paused:
            connection.resume()
        waiter = self._loop.create_future()
        self._waiter = waiter
        self._last_activity = self._loop.time()
        try:
            await waiter
        finally:
            self._waiter = None

    def _take(self) -> bytes:
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._buffered = 0
        if self._connection.paused:
            self._connection.resume()
        return data

    # -- feeding (the connection's side) -----------------------------------------------------

    def head(
        self,
        status: int,
        items: list[tuple[str, str]],
        content_type: str,
        encoding: str | None,
    ) -> None:
        self.status = status
        self.headers = Headers(items)
        self._content_type = content_type.partition(";")[0].strip().lower()
        if encoding is not None:
            name = encoding.strip().lower()
            if name in _DECODER_WBITS:
                self._decoder = zlib.decompressobj(_DECODER_WBITS[name])
            elif name not in ("", "identity"):
                self.fail(InvalidResponse(f"unsupported content-encoding {encoding!r}"))
                return
        self._head_received = True
        self._wake()

    def feed(self, data: bytes) -> None:
        if self._error is not None:
            return
        if self._decoder is not None:
            try:
                data = self._decoder.decompress(data)
            except zlib.error:
                self.fail(InvalidResponse("the body does not match its content-encoding"))
                return
        if data:
            self._chunks.append(data)
            self._buffered += len(data)
            self._last_activity = self._loop.time()
            if self._buffered > HIGH_WATER and not self._connection.paused:
                self._connection.pause()
        self._wake()

    def finish(self) -> None:
        if self._decoder is not None:
            tail = self._decoder.flush()
            if tail:
                self._chunks.append(tail)
        self.complete = True
        self._cancel_timer()
        self._wake()

    def fail(self, error: TransportError) -> None:
        if self.complete or self._error is not None:
            return
        self._error = error
        self._cancel_timer()
        self._connection.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- deadlines ---------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        when = self._deadline
        if self._read_timeout_s is not None:
            idle_at = self._last_activity + self._read_timeout_s
            when = idle_at if when is None else min(when, idle_at)
        if when is not None:
            self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.complete or self._error is not None:
            return
        now = self._loop.time() + _TIMER_SLACK_S
        if self._deadline is not None and now >= self._deadline:
            self.fail(Timeout("the server did not answer in time", request_sent=True))
            return
        if self._read_timeout_s is not None and now - self._last_activity >= self._read_timeout_s:
            if self._waiter is not None:
                self.fail(Timeout("the server sent nothing in time", request_sent=True))
                return
            self._last_activity = now  # the silence was the reader's (busy elsewhere), not ours
        self._arm_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Connection(asyncio.Protocol):
    """A keep-alive connection carrying one request at a time (no pipelining)."""

    __slots__ = (
        "_content_type",
        "_encoding",
        "_framed",
        "_items",
        "_parser",
        "closed",
        "idle_since",
        "loop",
        "paused",
        "response",
        "reusable",
        "transport",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.response: Response | None = None
        self.closed = False
        self.paused = False
        self.reusable = True
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._items: list[tuple[str, str]] = []
        self._content_type = ""
        self._encoding: str | None = None
        self._framed = False  # Content-Length or chunked: the body does not end with the socket

    def send(self, response: Response, data: bytes) -> None:
        assert self.transport is not None
        self.response = response
        self.transport.write(data)

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    def pause(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()
            self.paused = True

    def resume(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's does not subclass it

    def data_received(self, data: bytes) -> None:
        if self.response is None or self.response.complete:
            self.close()  # bytes nobody asked for: the connection's state is unknown
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            response = self.response
            if response is not None:
                response.fail(InvalidResponse(f"the server's answer is not valid HTTP ({exc})"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        response = self.response
        if response is None or response.complete:
            return
        if not response.nothing_received and not self._framed and exc is None:
            response.finish()  # a body without length ends with the connection
        elif response.nothing_received:
            response.fail(
                ConnectionClosed(
                    "the server closed the connection before answering", request_sent=True
                )
            )
        else:
            response.fail(
                ConnectionClosed("the server closed the connection mid-answer", request_sent=True)
            )

    # -- httptools callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._items = []
        self._content_type = ""
        self._encoding = None
        self._framed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        self._items.append((key, text))
        if len(key) in (12, 14, 16, 17):  # the lengths of the names framing depends on
            lower = key.lower()
            if lower == "content-type":
                self._content_type = text
            elif lower == "content-encoding":
                self._encoding = text
            elif lower in ("content-length", "transfer-encoding"):
                self._framed = True

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        response = self.response
        if response is None or 100 <= status < 200:
            return  # an interim answer (100 Continue): the real one follows
        response.head(status, self._items, self._content_type, self._encoding)

    def on_body(self, body: bytes) -> None:
        response = self.response
        if response is not None:
            response.feed(body)

    def on_message_complete(self) -> None:
        response = self.response
        status = self._parser.get_status_code()
        if response is None or 100 <= status < 200:
            return
        if not self._parser.should_keep_alive():
            self.reusable = False
        response.finish()
