"""Shared plumbing for the bench's stub servers: run an aiohttp app on uvloop and count traffic.

The stubs count TCP connections they accept and requests they serve, so the bench can tell
new connections from reused keep-alive ones for whatever client talks to them. ``GET /_stats``
reports the counters and ``POST /_reset`` zeroes them; both are excluded from the counts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

import orjson
import uvloop
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

STATS_PATH = "/_stats"
RESET_PATH = "/_reset"


class TrafficCounter:
    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0

    def reset(self) -> None:
        self.connections = 0
        self.requests = 0

    def snapshot(self) -> dict[str, Any]:
        times = os.times()
        return {
            "connections": self.connections,
            "requests": self.requests,
            "cpu_s": times.user + times.system,
        }


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def add_counting(app: web.Application, counter: TrafficCounter) -> None:
    """Count every served request except the stats routes themselves."""

    @web.middleware
    async def count_requests(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path not in (STATS_PATH, RESET_PATH):
            counter.requests += 1
        return await handler(request)

    async def stats(_: web.Request) -> web.Response:
        return json_response(counter.snapshot())

    async def reset(_: web.Request) -> web.Response:
        counter.reset()
        return json_response(counter.snapshot())

    app.middlewares.append(count_requests)
    app.router.add_get(STATS_PATH, stats)
    app.router.add_post(RESET_PATH, reset)


async def _serve(app: web.Application, counter: TrafficCounter, host: str, port: int) -> None:
    # access_log=None: a stub must stay cheaper than anything it is compared with.
    runner = web.AppRunner(app, access_log=None, handle_signals=True)
    await runner.setup()
    server = runner.server
    assert server is not None
    original = server.connection_made

    def connection_made(handler: RequestHandler, transport: asyncio.Transport) -> None:
        counter.connections += 1
        original(handler, transport)

    server.connection_made = connection_made  # type: ignore[method-assign]
    site = web.TCPSite(runner, host, port, backlog=4096, reuse_address=True)
    await site.start()
    print(f"listening on http://{host}:{port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def serve(app: web.Application, counter: TrafficCounter, host: str, port: int) -> None:
    add_counting(app, counter)
    uvloop.run(_serve(app, counter, host, port))


def host_port_args(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    return parser
