"""Keep-alive connections to one origin (scheme, host, port), reused most-recent first."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from dataclasses import dataclass

from .errors import ConnectError, Timeout
from .http1 import Connection


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
