"""Raw-wire clients for the edge tests: bytes written as given, answers read by their framing,
and what a server process holds (fds, tasks, RSS) measured between cases."""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field

import orjson

GUARD_S = 10.0  # against a hang, never a timing assertion
CHAT = "/v1/chat/completions"
BODY = orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return orjson.loads(self.body)


class Closed(Exception):
    """The server closed the connection (or reset it) before a whole answer."""


class RawClient:
    """One TCP connection, requests written byte for byte, responses read by their framing."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, address: tuple[str, int]) -> RawClient:
        return cls(*await asyncio.open_connection(*address))

    async def send(self, data: bytes) -> bool:
        """Write ``data``; False when the server has already closed the connection."""
        try:
            self.writer.write(data)
            await self.writer.drain()
        except ConnectionError:
            return False
        return True

    async def answer(self, timeout: float = GUARD_S) -> Answer:
        return await asyncio.wait_for(self._read(), timeout)

    async def closed_by_server(self, timeout: float = GUARD_S) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1), timeout) == b""
        except ConnectionError:
            return True

    async def _read(self) -> Answer:
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
            status_line, *lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            status = int(status_line.split()[1])
            if "content-length" in headers:
                body = await self.reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding") == "chunked":
                body = await self._chunks()
            elif status < 200:
                body = b""
            else:
                body = await self.reader.read()
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise Closed from exc
        return Answer(status, headers, body)

    async def _chunks(self) -> bytes:
        parts = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
            data = await self.reader.readexactly(size + 2)
            if size == 0:
                return b"".join(parts)
            parts.append(data[:-2])

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


@dataclass
class Outcome:
    """What a server made of one case: the statuses it answered, and whether it then closed."""

    statuses: list[int] = field(default_factory=list)
    closed: bool = False

    @property
    def refused(self) -> bool:
        """The first thing the client saw was a 4xx or the connection closing."""
        return not self.statuses or 400 <= self.statuses[0] < 500


async def outcome(client: RawClient, first_s: float, then_s: float) -> Outcome:
    """Answers until the server closes or is quiet (``first_s`` for the first, then ``then_s``)."""
    result = Outcome()
    timeout = first_s
    while True:
        try:
            answer = await client.answer(timeout)
        except Closed:
            result.closed = True
            return result
        except TimeoutError:
            return result
        result.statuses.append(answer.status)
        if answer.status >= 200:
            timeout = then_s


@dataclass(frozen=True)
class Held:
    fds: int
    tasks: int
    rss_bytes: int


def held() -> Held:
    """What this process holds now: open fds, asyncio tasks and resident memory."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return Held(
        fds=len(os.listdir("/proc/self/fd")),
        tasks=len(asyncio.all_tasks()),
        rss_bytes=pages * os.sysconf("SC_PAGE_SIZE"),
    )


def chat_request(token: str, body: bytes = BODY, *, extra: str = "", version: str = "1.1") -> bytes:
    head = (
        f"POST {CHAT} HTTP/{version}\r\nHost: sidecar\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body


def get_request(path: str, *, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: sidecar\r\n{extra}\r\n".encode()
