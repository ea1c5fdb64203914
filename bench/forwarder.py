"""The floor: the least an aiohttp proxy can do for one LLM request.

It forwards the body and content type, swaps the caller's key for the provider key, reuses
pooled keep-alive connections, and relays streams chunk by chunk. No auth, no routing, no
logging, no audit: whatever the sidecar spends beyond this is the price of its features.
"""

from __future__ import annotations

import argparse

import aiohttp
import uvloop
from aiohttp import web

SSE = "text/event-stream"
PASSED_RESPONSE_HEADERS = ("Content-Type", "Cache-Control")


class Forwarder:
    def __init__(self, upstream: str, key: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.key = key
        self.session: aiohttp.ClientSession | None = None

    async def start(self, _: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False)

    async def stop(self, _: web.Application) -> None:
        if self.session:
            await self.session.close()

    async def forward(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        headers = {
            "Content-Type": request.headers.get("Content-Type", "application/json"),
            "Authorization": f"Bearer {self.key}",
        }
        body = await request.read()
        url = self.upstream + request.path
        async with self.session.post(url, data=body, headers=headers) as upstream:
            passed = {
                h: upstream.headers[h] for h in PASSED_RESPONSE_HEADERS if h in upstream.headers
            }
            if not upstream.headers.get("Content-Type", "").startswith(SSE):
                return web.Response(
                    body=await upstream.read(), status=upstream.status, headers=passed
                )
            response = web.StreamResponse(status=upstream.status, headers=passed)
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


def make_app(upstream: str, key: str) -> web.Application:
    forwarder = Forwarder(upstream, key)
    app = web.Application(client_max_size=32 * 1024 * 1024)
    app.on_startup.append(forwarder.start)
    app.on_cleanup.append(forwarder.stop)
    app.router.add_post("/{tail:.*}", forwarder.forward)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="Bare aiohttp forwarder (the bench's floor).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:9000")
    parser.add_argument("--key", default="sk-bench")
    args = parser.parse_args()
    print(f"listening on http://{args.host}:{args.port}", flush=True)
    web.run_app(
        make_app(args.upstream, args.key),
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        loop=uvloop.new_event_loop(),
        backlog=4096,
    )


if __name__ == "__main__":
    main()
