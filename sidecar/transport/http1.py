"""One HTTP/1.1 client connection as an asyncio protocol, and the response read from it.

httptools (llhttp, the parser Node.js uses) does the framing: Content-Length, chunked and
close-delimited bodies. Body bytes are buffered per response and handed to the reader as they
arrive. Reading from the socket pauses while a slow reader leaves more than ``HIGH_WATER``
bytes unread, so a stream relayed to a slow client cannot grow memory without bound; a
compressed body is decoded at the same pace (see ``decoding.py``).

What a server can make the client hold is bounded as it arrives (SPEC §10): a response head
(with any interim 1xx heads before it) to ``MAX_HEAD_BYTES`` and ``MAX_HEADER_FIELDS`` fields,
trailers to as many fields and to ``MAX_HEAD_BYTES`` without a body byte, the decoded body to
the caller's ``max_body_bytes``. httptools gathers a header value across reads by copying it,
so an unbounded value would also cost quadratic time.
"""

from __future__ import annotations

import asyncio
import select
import zlib
from collections.abc import Callable, Iterator
from typing import cast

import httptools

from .decoding import Inflater, inflater_for
from .errors import (
    BodyTooLarge,
    ConnectionClosed,
    InvalidResponse,
    Timeout,
    TransportError,
)

HIGH_WATER = 256 * 1024
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADER_FIELDS = 128
# Decoded bytes taken from a compressed body per step.
_INFLATE_STEP = 64 * 1024
# A timer can fire a little before its time (loop clock resolution).
_TIMER_SLACK_S = 0.001


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
        "_delivered",
        "_ended",
        "_error",
        "_head_received",
        "_inflater",
        "_last_activity",
        "_loop",
        "_max_body_bytes",
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
        max_body_bytes: int | None = None,
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
        self._inflater: Inflater | None = None  # when the body is compressed
        self._max_body_bytes = max_body_bytes
        self._delivered = 0  # decoded body bytes handed to the buffer
        self._ended = False  # the body's last byte arrived (a compressed one may be undecoded)
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

    async def read(self, max_bytes: int | None = None) -> bytes:
        """The whole (remaining) body; ``BodyTooLarge`` past ``max_bytes`` (reading stops there,
        so at most that much more is held)."""
        if self.complete:  # it has all arrived (most answers): taken without a coroutine a chunk
            if max_bytes is not None and self._buffered > max_bytes:
                raise BodyTooLarge(max_bytes)
            return self._take() if self._chunks else b""
        parts = []
        size = 0
        while chunk := await self.read_chunk():
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:
                raise BodyTooLarge(max_bytes)
            parts.append(chunk)
        return b"".join(parts)

    async def read_chunk(self) -> bytes:
        """The bytes that arrived since the last call, waiting for some; ``b""`` at the end."""
        while not self._chunks:
            if self.complete:
                return b""
            if self._error is not None:
                raise self._error
            await self._wait()
        return self._take()

    def release(self, *, reuse: bool = True) -> None:
        """Return the connection to its pool if the response was read whole, else close it.

        ``reuse=False`` closes it even then: the caller, which knows the protocol inside the
        body, saw it end abnormally (a stream without its end marker), and a server that cut
        its answer may drop the connection just after the next request was written on it."""
        if self._released:
            return
        self._released = True
        self._cancel_timer()
        connection = self._connection
        connection.response = None
        self._on_release(connection, reuse and self.complete and connection.reusable)

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
        if self._inflater is not None and self._inflater.pending:
            self._inflate()
        if self._connection.paused and self._buffered <= HIGH_WATER:
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
            try:
                self._inflater = inflater_for(encoding)
            except ValueError:
                self.fail(InvalidResponse(f"unsupported content-encoding {encoding!r}"))
                return
        self._head_received = True
        self._wake()

    def feed(self, data: bytes) -> None:
        if self._error is not None:
            return
        self._last_activity = self._loop.time()
        if self._inflater is None:
            self._deliver(data)
        else:
            self._inflater.push(data)
            self._inflate()
        self._wake()

    def finish(self) -> None:
        self._ended = True
        if self._inflater is not None:
            self._inflate()  # completes the response once all is decoded
        else:
            self._complete()

    def _deliver(self, data: bytes) -> None:
        limit = self._max_body_bytes
        if limit is not None and self._delivered + len(data) > limit:
            if self._delivered < limit:  # the reader gets the body up to the bound
                self._chunks.append(data[: limit - self._delivered])
                self._buffered += limit - self._delivered
                self._delivered = limit
            self.fail(BodyTooLarge(limit))
            return
        self._delivered += len(data)
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > HIGH_WATER and not self._connection.paused:
            self._connection.pause()

    def _inflate(self) -> None:
        """Decode until the input is used up or the reader is ``HIGH_WATER`` behind (reading
        resumes it, see :meth:`_take`); one byte past ``max_body_bytes`` at most."""
        inflater = self._inflater
        assert inflater is not None
        limit = self._max_body_bytes
        while self._error is None and self._buffered <= HIGH_WATER and inflater.pending:
            step = (
                _INFLATE_STEP if limit is None else min(_INFLATE_STEP, limit - self._delivered + 1)
            )
            try:
                data = inflater.pull(step)
            except zlib.error:
                self.fail(InvalidResponse("the body does not match its content-encoding"))
                return
            if data:
                self._deliver(data)
        if self._ended and not inflater.pending:
            self._complete()
        elif inflater.pending and not self._connection.paused:
            self._connection.pause()

    def _complete(self) -> None:
        if self._error is not None or self.complete:
            return
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


class _Refused(Exception):
    """Raised in a parser callback to stop parsing; the reason is the connection's refusal."""


class Connection(asyncio.Protocol):
    """A keep-alive connection carrying one request at a time (no pipelining)."""

    __slots__ = (
        "_body_bytes",
        "_content_type",
        "_encoding",
        "_fields",
        "_framed",
        "_head_done",
        "_head_left",
        "_items",
        "_message_done",
        "_parser",
        "_poll",
        "_refusal",
        "_silent_bytes",
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
        self._poll: select.poll | None = None
        self._items: list[tuple[str, str]] = []
        self._content_type = ""
        self._encoding: str | None = None
        self._framed = False  # Content-Length or chunked: the body does not end with the socket
        self._start_exchange()

    def _start_exchange(self) -> None:
        self._head_left = MAX_HEAD_BYTES  # for the final head and any interim ones before it
        self._head_done = False  # the final (non-1xx) head was parsed
        self._message_done = False  # the final answer's last byte was parsed
        self._fields = 0  # header fields of the head being parsed, then trailer fields
        self._body_bytes = 0  # body bytes as sent (before decoding)
        self._silent_bytes = 0  # bytes received since the last read that carried body bytes
        self._refusal: TransportError | None = None

    def send(self, response: Response, data: bytes, body: bytes | bytearray = b"") -> None:
        """Write a request: ``data`` (its head, or all of it), then any ``body`` sent apart."""
        assert self.transport is not None
        self.response = response
        self._start_exchange()
        self.transport.write(data)
        if body:
            self.transport.write(body)

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    def alive(self) -> bool:
        """Whether an idle connection can carry a request: not closed, and the server has not
        closed, reset or written to it since (bytes the event loop may not have handled yet,
        the stale keep-alive race)."""
        if self.closed:
            return False
        if self._poll is None:
            sock = self.transport.get_extra_info("socket") if self.transport else None
            if sock is None:
                return True
            self._poll = select.poll()
            self._poll.register(sock.fileno(), select.POLLIN)
        return not self._poll.poll(0)

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
        if self.response is None or self._message_done:
            self.close()  # bytes nobody asked for: the connection's state is unknown
            return
        if not self._head_done:
            if len(data) <= self._head_left:
                self._head_left -= len(data)
                self._parse(data)
                return
            # Parse only what the head may still take; the rest only if that completed it.
            allowed, self._head_left = self._head_left, 0
            if not self._parse(data[:allowed]):
                return
            if not self._head_done:
                message = f"the response head is larger than {MAX_HEAD_BYTES} bytes"
                self._refuse(InvalidResponse(message))
                return
            data = data[allowed:]
        body_before = self._body_bytes
        if not self._parse(data) or self._message_done:
            return
        # Trailers and chunk framing carry no body; a server sending only those is stopped.
        self._silent_bytes = 0 if self._body_bytes > body_before else self._silent_bytes + len(data)
        if self._silent_bytes > MAX_HEAD_BYTES:
            message = f"the server sent more than {MAX_HEAD_BYTES} bytes without a body byte"
            self._refuse(InvalidResponse(message))

    def _parse(self, data: bytes) -> bool:
        """Feed the parser; False if that ended the connection."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            refusal = self._refusal
            self._refuse(
                refusal or InvalidResponse(f"the server's answer is not valid HTTP ({exc})")
            )
            return False
        return not self.closed

    def _refuse(self, error: TransportError) -> None:
        if self.response is not None:
            self.response.fail(error)
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        response = self.response
        if response is None or response.complete or self._message_done:
            return  # (a compressed body may still be decoding: its bytes are all here)
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
        if self._message_done:
            self._refusal = InvalidResponse("the server sent more than one answer")
            raise _Refused
        self._fields = 0
        self._items = []
        self._content_type = ""
        self._encoding = None
        self._framed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self._fields > MAX_HEADER_FIELDS:
            section = "trailer" if self._head_done else "header"
            message = f"the response has more than {MAX_HEADER_FIELDS} {section} fields"
            self._refusal = InvalidResponse(message)
            raise _Refused
        if self._head_done:
            return  # a trailer: not part of the headers the caller has already seen
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
        self._head_done = True
        self._fields = 0
        response.head(status, self._items, self._content_type, self._encoding)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        response = self.response
        if response is not None:
            response.feed(body)

    def on_message_complete(self) -> None:
        response = self.response
        status = self._parser.get_status_code()
        if response is None or 100 <= status < 200:
            return
        self._message_done = True
        if not self._parser.should_keep_alive():
            self.reusable = False
        response.finish()
