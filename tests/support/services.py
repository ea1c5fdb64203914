"""Real local HTTP tool services for tests: aiohttp on 127.0.0.1, random port, recording every
request they receive.

By default a service echoes what it got (method, path, query, JSON body) with 200. Knobs per
path (or for every path): status, latency, non-JSON or binary body, huge body, redirect, and a
required credential header (401 when it does not match)::

    async with ToolService() as service:
        service.reply("/slow", delay_s=2)
        service.reply("/big", size=1_000_000)
        service.require_header("Authorization", "Bearer s3cret")
        ...
        assert service.requests[0].raw_path == "/items/a%2Fb"
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

ECHO = object()


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    raw_path: str  # path and query exactly as they arrived on the wire (still percent-encoded)
    path: str  # decoded path
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    json: Any = ECHO
    text: str | None = None
    body: bytes | None = None
    content_type: str | None = None
    delay_s: float = 0.0
    redirect_to: str | None = None
    size: int | None = None  # stream a JSON string body of exactly this many bytes
    drop: bool = False  # close the connection without answering
    headers: dict[str, str] = field(default_factory=dict)


class ToolService:
    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._replies: dict[str | None, Reply] = {}
        self._required: tuple[str, str] | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.completed = 0  # requests whose answer was fully written

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reply(self, path: str | None = None, **knobs: Any) -> None:
        """Set how ``path`` (decoded, without query; None: every path) is answered."""
        self._replies[path] = Reply(**knobs)

    def require_header(self, name: str, value: str) -> None:
        self._required = (name, value)

    async def start(self) -> ToolService:
        app = web.Application()
        app.router.add_route("*", r"/{tail:[\s\S]*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ToolService:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        recorded = RecordedRequest(
            method=request.method,
            raw_path=request.raw_path,
            path=request.path,
            query={key: request.query.getall(key) for key in request.query},
            headers=dict(request.headers),
            body=body,
        )
        self.requests.append(recorded)
        reply = self._replies.get(request.path) or self._replies.get(None) or Reply()
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.drop and request.transport is not None:
            request.transport.abort()
            raise asyncio.CancelledError  # nothing more to send on a closed connection
        if self._required and request.headers.get(self._required[0]) != self._required[1]:
            response: web.StreamResponse = web.json_response({"error": "unauthorized"}, status=401)
        else:
            response = await self._answer(request, recorded, reply)
        self.completed += 1
        return response

    async def _answer(
        self, request: web.Request, recorded: RecordedRequest, reply: Reply
    ) -> web.StreamResponse:
        if reply.redirect_to is not None:
            return web.Response(status=reply.status, headers={"Location": reply.redirect_to})
        if reply.size is not None:
            return await _stream_large(request, reply)
        if reply.body is not None:
            return web.Response(
                status=reply.status,
                body=reply.body,
                content_type=reply.content_type or "application/octet-stream",
                headers=reply.headers,
            )
        if reply.text is not None:
            return web.Response(
                status=reply.status,
                text=reply.text,
                content_type=reply.content_type or "text/plain",
                headers=reply.headers,
            )
        data = _echo(recorded) if reply.json is ECHO else reply.json
        return web.Response(
            status=reply.status,
            body=orjson.dumps(data),
            content_type=reply.content_type or "application/json",
            headers=reply.headers,
        )


def _echo(recorded: RecordedRequest) -> dict[str, Any]:
    return {
        "method": recorded.method,
        "path": recorded.path,
        "raw_path": recorded.raw_path,
        "query": recorded.query,
        "json": orjson.loads(recorded.body) if recorded.body else None,
    }


async def _stream_large(request: web.Request, reply: Reply) -> web.StreamResponse:
    """A JSON string of exactly ``reply.size`` bytes, sent in chunks without Content-Length."""
    assert reply.size is not None and reply.size >= 2
    response = web.StreamResponse(status=reply.status)
    response.content_type = "application/json"
    response.enable_chunked_encoding()
    await response.prepare(request)
    await response.write(b'"')
    remaining = reply.size - 2
    chunk = b"x" * 65536
    while remaining > 0:
        await response.write(chunk[: min(remaining, len(chunk))])
        remaining -= len(chunk)
    await response.write(b'"')
    await response.write_eof()
    return response
