"""Scripted raw TCP servers on 127.0.0.1: each connection runs a script that writes exact
bytes, so a test can play any well- or ill-behaved HTTP server."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "RawServer"], Awaitable[None]]


@dataclass
class RawServer:
    """A TCP server whose every connection runs ``script``; records what it received."""

    script: Script
    port: int = 0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    eofs: int = 0
    server: asyncio.Server | None = None

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def url(self, path: str = "/x", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.script(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        """One request (head + Content-Length body), or None at EOF."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            self.eofs += 1
            return None
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        return request

    async def hung_up(self) -> bool:
        """Whether the client closes a connection within 2 s (the server sees EOF)."""
        for _ in range(100):
            if self.eofs:
                return True
            await asyncio.sleep(0.02)
        return False

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def answer(body: bytes, *extra: str, status: str = "200 OK") -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def keep_answering(
    response: bytes,
) -> Script:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer):
        while await srv.read_request(reader) is not None:
            writer.write(response)
            await writer.drain()

    return script


def replies_once(data: bytes) -> Script:
    """Reads one request, sends ``data``, then closes the connection."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer):
        await srv.read_request(reader)
        writer.write(data)
        await writer.drain()

    return script
