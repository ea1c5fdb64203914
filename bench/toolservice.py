"""A tool service that answers instantly: the HTTP side of one mediated tool round."""

from __future__ import annotations

import orjson
from aiohttp import web

from bench.stubserver import TrafficCounter, host_port_args, serve

TOOL_PATH = "/lookup/{q}"
RECORD = {
    "symbol": "ACME",
    "price": 182.35,
    "currency": "USD",
    "positions": [{"account": "desk-1", "quantity": 120}, {"account": "desk-2", "quantity": 40}],
    "note": "instant answer from the bench tool service",
}


async def lookup(request: web.Request) -> web.Response:
    body = orjson.dumps({"query": request.match_info["q"], **RECORD})
    return web.Response(body=body, content_type="application/json")


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_get(TOOL_PATH, lookup)
    return app


def main() -> None:
    args = host_port_args("Instant tool service stub.").parse_args()
    serve(make_app(), TrafficCounter(), args.host, args.port)


if __name__ == "__main__":
    main()
