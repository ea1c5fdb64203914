"""A hostile MCP service on 127.0.0.1 (issue 30): it speaks just enough Streamable HTTP (JSON
answers) for the official client to connect, then answers ``tools/call`` with a 64 MiB result
(as fast as the client reads) and ``tools/list`` with pages that never end (fresh cursors, one
cursor repeated, one page of 20,000 tools, or pages of 6 MiB each)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from aiohttp import web

Listing = Literal["endless", "repeated", "huge page", "fat pages"]
# Each of the endless "fat pages": one tool whose description stays under the bound of one page.
FAT_PAGE_BYTES = 6 * 1024 * 1024
HUGE_RESULT_BYTES = 64 * 1024 * 1024
_TOOL = {
    "name": "dump",
    "description": "Returns everything.",
    "inputSchema": {"type": "object", "properties": {}},
}


@dataclass
class HostileMcp:
    url: str = ""
    listing: Listing = "endless"
    result_bytes_sent: int = 0  # of the huge result, before the client stopped reading
    pages_served: int = 0


def _answer(request_id: Any, result: dict[str, Any]) -> web.Response:
    body = {"jsonrpc": "2.0", "id": request_id, "result": result}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _page(service: HostileMcp) -> dict[str, Any]:
    service.pages_served += 1
    number = service.pages_served
    if service.listing == "huge page":
        tools = [{**_TOOL, "name": f"t{number}_{i}"} for i in range(20_000)]
        return {"tools": tools, "nextCursor": f"c{number}"}
    if service.listing == "fat pages":
        tool = {**_TOOL, "name": f"t{number}", "description": "x" * FAT_PAGE_BYTES}
        return {"tools": [tool], "nextCursor": f"c{number}"}
    cursor = "again" if service.listing == "repeated" else f"c{number}"
    return {"tools": [{**_TOOL, "name": f"t{number}"}], "nextCursor": cursor}


async def _huge_result(request: web.Request, service: HostileMcp, request_id: Any) -> Any:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    head = b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"' % (
        orjson.dumps(request_id)
    )
    await response.write(head)
    block = b"x" * 65536
    try:
        while service.result_bytes_sent < HUGE_RESULT_BYTES:
            await response.write(block)
            service.result_bytes_sent += len(block)
        await response.write(b'"}]}}')
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        pass  # the client stopped reading
    return response


def _app(service: HostileMcp) -> web.Application:
    async def mcp(request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=405)
        message = orjson.loads(await request.read())
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            return web.Response(status=202)
        if method == "initialize":
            version = message["params"]["protocolVersion"]
            return _answer(
                request_id,
                {
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "hostile", "version": "1"},
                },
            )
        if method == "tools/list":
            return _answer(request_id, _page(service))
        if method == "tools/call":
            return await _huge_result(request, service, request_id)
        error = {"code": -32601, "message": "method not found"}
        body = {"jsonrpc": "2.0", "id": request_id, "error": error}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/mcp", mcp)
    return app


@asynccontextmanager
async def running_hostile_mcp(listing: Listing = "endless") -> AsyncIterator[HostileMcp]:
    service = HostileMcp(listing=listing)
    runner = web.AppRunner(_app(service), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    service.url = f"http://{host}:{port}/mcp"
    try:
        yield service
    finally:
        await runner.cleanup()
