"""The client: requests prepared once (head bytes rendered ahead), sent over pooled keep-alive
connections, one pool per origin (``ConnectionPool``: idle connections reused most-recent
first, swept once idle past the keep-alive time)."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from .errors import ConnectError, ConnectionClosed, Timeout
from .http1 import Connection, Response

# Safe to send again when a kept-alive connection turns out closed before any answer (RFC 9110
# 9.2.2); a POST that was written is never repeated (docs/transport.md says when one is).
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_JOINED_BELOW = 64 * 1024  # request bodies up to this go out with their head in one write


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


class ConnectionCounts:
    """New versus reused connections (the keep-alive target)."""

    __slots__ = ("created", "reused")

    def __init__(self) -> None:
        self.created = 0
        self.reused = 0


class ConnectionPool:
    def __init__(
        self,
        origin: Origin,
        *,
        ssl_context: ssl.SSLContext | None,
        connect_timeout_s: float,
        keepalive_s: float,
        max_connections: int | None,
        counts: ConnectionCounts,
    ) -> None:
        self.origin = origin
        self._ssl = ssl_context
        self._connect_timeout_s = connect_timeout_s
        self._keepalive_s = keepalive_s
        self._counts = counts
        self._idle: list[Connection] = []
        self.in_use = 0
        self._slots = asyncio.Semaphore(max_connections) if max_connections else None
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    def reuse(self) -> Connection | None:
        """A live idle connection, if there is one and no limit makes the caller wait (the
        common case: no await, no coroutine)."""
        return self._pop_idle() if self._slots is None else None

    async def acquire(
        self, deadline: float | None, *, fresh: bool = False
    ) -> tuple[Connection, bool]:
        """A connection ready for one request, and whether it was reused; with ``fresh``,
        always a new one."""
        loop = asyncio.get_running_loop()
        if self._slots is not None:
            await self._take_slot(deadline)
        try:
            connection = None if fresh else self._pop_idle()
            if connection is not None:
                return connection, True
            connection = await self._connect(loop, deadline)
        except BaseException:
            if self._slots is not None:
                self._slots.release()
            raise
        self._counts.created += 1
        self.in_use += 1
        return connection, False

    def _pop_idle(self) -> Connection | None:
        idle = self._idle
        while idle:
            connection = idle.pop()
            expired = connection.loop.time() - connection.idle_since > self._keepalive_s
            if expired or not connection.alive():
                connection.close()
                continue
            self._counts.reused += 1
            self.in_use += 1
            return connection
        return None

    @property
    def idle(self) -> int:
        return len(self._idle)

    def release(self, connection: Connection, reusable: bool) -> None:
        self.in_use -= 1
        if self._slots is not None:
            self._slots.release()
        if not reusable or self._closed or connection.closed:
            connection.close()
            return
        connection.idle_since = connection.loop.time()
        self._idle.append(connection)
        if self._sweeper is None:
            self._sweeper = connection.loop.call_later(self._keepalive_s, self._sweep)

    def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for connection in self._idle:
            connection.close()
        self._idle.clear()

    def _sweep(self) -> None:
        """Close connections idle past the keep-alive time, oldest first."""
        self._sweeper = None
        if not self._idle:
            return
        loop = self._idle[0].loop
        expired_before = loop.time() - self._keepalive_s
        while self._idle and (self._idle[0].idle_since <= expired_before or self._idle[0].closed):
            self._idle.pop(0).close()
        if self._idle:
            wake_at = self._idle[0].idle_since + self._keepalive_s
            self._sweeper = loop.call_at(wake_at, self._sweep)

    async def _take_slot(self, deadline: float | None) -> None:
        assert self._slots is not None
        if not self._slots.locked() or deadline is None:
            await self._slots.acquire()
            return
        try:
            async with asyncio.timeout_at(deadline):
                await self._slots.acquire()
        except TimeoutError:
            raise Timeout("no connection became free in time", request_sent=False) from None

    async def _connect(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> Connection:
        timeout = self._connect_timeout_s
        if deadline is not None:
            timeout = max(0.0, min(timeout, deadline - loop.time()))
        origin = self.origin
        try:
            async with asyncio.timeout(timeout):
                transport, connection = await loop.create_connection(
                    lambda: Connection(loop),
                    origin.host,
                    origin.port,
                    ssl=self._ssl,
                    server_hostname=origin.host if self._ssl is not None else None,
                )
        except TimeoutError:
            raise Timeout(
                f"connecting took longer than {timeout:g} s", request_sent=False
            ) from None
        except socket.gaierror:
            raise ConnectError("its host name does not resolve") from None
        except ssl.SSLError as exc:
            # The reason code, not str(exc): that can name the host.
            raise ConnectError(f"TLS handshake failed: {exc.reason or 'unknown reason'}") from None
        except OSError as exc:
            # strerror may embed the address; the errno text never does.
            reason = os.strerror(exc.errno).lower() if exc.errno else "connection failed"
            raise ConnectError(reason) from None
        # uvloop may return before calling connection_made; the transport is usable already.
        connection.transport = transport
        return connection


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A request line and fixed headers rendered once; per send only the body and any extra
    headers are added."""

    method: str
    pool: ConnectionPool
    head: bytes  # request line + headers, without Content-Length and the closing blank line
    sends_length: bool


@dataclass(frozen=True, slots=True)
class _Limits:
    """One send's bounds, shared by its attempts."""

    deadline: float | None
    read_timeout_s: float | None
    max_body_bytes: int | None


class HttpClient:
    """HTTP/1.1 over pooled keep-alive connections; what aiohttp's client session did for the
    sidecar, at a fraction of the CPU per request (see ``bench/README.md``)."""

    def __init__(
        self,
        *,
        keepalive_s: float,
        connect_timeout_s: float,
        max_connections_per_origin: int | None = None,
        counts: ConnectionCounts | None = None,
        default_headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.connections = counts if counts is not None else ConnectionCounts()
        self._keepalive_s = keepalive_s
        self._connect_timeout_s = connect_timeout_s
        self._max_connections = max_connections_per_origin
        self._default_headers = dict(default_headers or {})
        self._pools: dict[tuple[str, str], ConnectionPool] = {}
        self._ssl = ssl_context  # created on first https origin when not given
        self._closed = False

    def prepare(
        self, method: str, url: str, headers: Mapping[str, str] | None = None
    ) -> PreparedRequest:
        """Render ``method url`` with ``headers`` (the client's defaults first); raises
        ``ValueError`` for a URL or header that cannot be sent as is."""
        method = method.upper()
        pool, target = self._route(url)
        _check_target(target)
        lines = [f"{method} {target} HTTP/1.1\r\nHost: {pool.origin.host_header}\r\n"]
        merged = {**self._default_headers, **(headers or {})}
        lines.extend(_header_lines(merged.items()))
        return PreparedRequest(method, pool, "".join(lines).encode(), method in _BODY_METHODS)

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout_s: float | None = None,
        read_timeout_s: float | None = None,
        max_body_bytes: int | None = None,
        retry_unanswered: bool = False,
    ) -> Response:
        return await self.send(
            self.prepare(method, url, headers),
            body,
            timeout_s=timeout_s,
            read_timeout_s=read_timeout_s,
            max_body_bytes=max_body_bytes,
            retry_unanswered=retry_unanswered,
        )

    async def send(
        self,
        prepared: PreparedRequest,
        body: bytes | bytearray | None = None,
        *,
        extra_headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        read_timeout_s: float | None = None,
        max_body_bytes: int | None = None,
        retry_unanswered: bool = False,
    ) -> Response:
        """Send and wait for the response head; the caller reads the body, then releases.

        ``timeout_s`` bounds the whole exchange (connect, head and body); ``read_timeout_s``
        bounds each wait for more bytes (a stream's gap between chunks); ``max_body_bytes``
        bounds the body as the caller reads it (decoded): past it, reading raises
        ``BodyTooLarge``. ``retry_unanswered`` sends a request of any method once more on a new
        connection when a reused one ended before any byte of the answer: for a caller whose
        request has no side effect a repeat could double (a model call; never a tool call).
        """
        if self._closed:
            raise RuntimeError("the HTTP client is closed")
        deadline = asyncio.get_running_loop().time() + timeout_s if timeout_s else None
        data = prepared.head
        if extra_headers:
            data += "".join(_header_lines(extra_headers.items())).encode()
        if body is not None or prepared.sends_length:
            body = body or b""
            data += b"Content-Length: %d\r\n\r\n" % len(body)
            if len(body) <= _JOINED_BELOW:  # one write; a large body is not copied to join it
                data += body
                body = b""
        else:
            data += b"\r\n"
            body = b""
        limits = _Limits(deadline, read_timeout_s, max_body_bytes)
        request = (data, body)
        response, reused = await self._exchange(prepared.pool, request, limits)
        if (
            reused
            and response is None
            and (retry_unanswered or prepared.method in IDEMPOTENT_METHODS)
        ):
            # The server closed the kept-alive connection without answering: once more, on a
            # new connection (another idle one may be as stale).
            response, _ = await self._exchange(prepared.pool, request, limits, fresh=True)
        if response is None:
            raise ConnectionClosed(
                "the server closed the connection before answering", request_sent=True
            )
        return response

    def usage(self) -> tuple[int, int]:
        """(idle pooled connections, connections carrying a request) across all origins."""
        pools = self._pools.values()
        return sum(pool.idle for pool in pools), sum(pool.in_use for pool in pools)

    async def close(self) -> None:
        self._closed = True
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    async def _exchange(
        self,
        pool: ConnectionPool,
        request: tuple[bytes, bytes | bytearray],
        limits: _Limits,
        *,
        fresh: bool = False,
    ) -> tuple[Response | None, bool]:
        """The response, or None if a reused connection was found closed before any answer."""
        connection = None if fresh else pool.reuse()
        if connection is not None:
            reused = True
        else:
            connection, reused = await pool.acquire(limits.deadline, fresh=fresh)
        response = Response(
            connection,
            pool.release,
            deadline=limits.deadline,
            read_timeout_s=limits.read_timeout_s,
            max_body_bytes=limits.max_body_bytes,
        )
        connection.send(response, *request)
        try:
            await response.wait_head()
        except ConnectionClosed:
            response.release()
            if reused and response.nothing_received:
                return None, True
            raise
        except BaseException:
            response.release()  # the connection's state is unknown: it is closed, not reused
            raise
        return response, reused

    def _route(self, url: str) -> tuple[ConnectionPool, str]:
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc)
        pool = self._pools.get(key)
        if pool is None:  # (an origin with a pool was checked when the pool was made)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"not an http(s) URL: {url!r}")
            pool = self._new_pool(parts.scheme, parts.hostname, parts.port)
            self._pools[key] = pool
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        return pool, target

    def _new_pool(self, scheme: str, host: str, port: int | None) -> ConnectionPool:
        tls = scheme == "https"
        if tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        origin = Origin(scheme, host, port or (443 if tls else 80))
        return ConnectionPool(
            origin,
            ssl_context=self._ssl if tls else None,
            connect_timeout_s=self._connect_timeout_s,
            keepalive_s=self._keepalive_s,
            max_connections=self._max_connections,
            counts=self.connections,
        )


def _header_lines(items: Iterable[tuple[str, str]]) -> list[str]:
    lines = []
    for name, value in items:
        if not name or ":" in name or _forbidden_in(name) or _forbidden_in(value):
            raise ValueError(f"header {name!r} cannot be sent: it contains a forbidden character")
        lines.append(f"{name}: {value}\r\n")
    return lines


def _forbidden_in(text: str) -> bool:
    # Three substring tests in C; a set of the text's characters cost more than the rest of
    # preparing a request.
    return "\r" in text or "\n" in text or "\0" in text


def _check_target(target: str) -> None:
    if any(c in target for c in " \r\n\0\t"):
        raise ValueError("the request target contains whitespace or control characters")
