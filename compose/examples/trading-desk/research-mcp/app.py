"""Research desk: an MCP tool service (Streamable HTTP, written with the official ``mcp`` SDK).

The pod grants its tools like any HTTP service's: the descriptor (descriptors/research-mcp.json,
written by ``clawc discover http://research-mcp:4200/mcp --token-env RESEARCH_API_TOKEN`` and
reviewed) says ``mcp: {path: /mcp}``, and the sidecar runs each granted call as ``tools/call``
here with the service's credential. Agents never reach this service.

Routes:
  GET  /healthz                     no authentication
  POST /mcp                         MCP (stateless, JSON answers); ``Authorization: Bearer
                                    <RESEARCH_API_TOKEN>``
Tools (both read-only): get_fundamentals(symbol), get_analyst_ratings(symbol).

Run: ``RESEARCH_API_TOKEN=... python app.py`` (listens on 0.0.0.0:4200, or $PORT).
Tests and scripts/demo.sh call :func:`create_app` and read :attr:`Research.received`.
"""

from __future__ import annotations

import hmac
import json
import os
from dataclasses import dataclass, field
from typing import Annotated, Any

import mcp_types as types
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse

FUNDAMENTALS = {
    "AAPL": {"sector": "Technology", "pe_ratio": 29.4, "market_cap_busd": 2950, "growth": 0.02},
    "MSFT": {"sector": "Technology", "pe_ratio": 35.1, "market_cap_busd": 3050, "growth": 0.15},
    "NVDA": {"sector": "Semiconductors", "pe_ratio": 52.8, "market_cap_busd": 2990, "growth": 1.22},
    "TSLA": {"sector": "Automotive", "pe_ratio": 61.0, "market_cap_busd": 775, "growth": -0.09},
}
RATINGS = {
    "AAPL": {"buy": 24, "hold": 14, "sell": 3},
    "MSFT": {"buy": 48, "hold": 4, "sell": 0},
    "NVDA": {"buy": 51, "hold": 6, "sell": 1},
    "TSLA": {"buy": 15, "hold": 20, "sell": 11},
}
READ_ONLY = types.ToolAnnotations(read_only_hint=True, idempotent_hint=True)
Symbol = Annotated[str, Field(pattern=r"^[A-Za-z]{1,5}$", description="Ticker, e.g. NVDA")]


def _known(symbol: str) -> str:
    upper = symbol.upper()
    if upper not in FUNDAMENTALS:
        raise ToolError(f"no research on {upper}")
    return upper


def research_server() -> MCPServer:
    server = MCPServer("research-desk", log_level="WARNING")

    @server.tool(
        description="Fundamentals of a company: sector, P/E ratio, market cap, revenue growth.",
        annotations=READ_ONLY,
    )
    def get_fundamentals(symbol: Symbol) -> dict[str, Any]:
        symbol = _known(symbol)
        figures = FUNDAMENTALS[symbol]
        return {
            "symbol": symbol,
            "sector": figures["sector"],
            "pe_ratio": figures["pe_ratio"],
            "market_cap_usd_bn": figures["market_cap_busd"],
            "revenue_growth_yoy": figures["growth"],
        }

    @server.tool(
        description="How many analysts rate a symbol buy, hold or sell.",
        annotations=READ_ONLY,
    )
    def get_analyst_ratings(symbol: Symbol) -> dict[str, Any]:
        symbol = _known(symbol)
        return {"symbol": symbol, **RATINGS[symbol]}

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return server


@dataclass
class Research:
    """The service as an ASGI app behind its bearer token, recording each MCP request:
    ``{"method", "path", "authorization", "authorized", "rpc", "tool"}`` (``authorization``: the
    header as sent, ``rpc``: the JSON-RPC method, ``tool``: the name a ``tools/call`` names)."""

    app: Any
    token: str
    received: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] == "/healthz":
            await self.app(scope, receive, send)
            return
        body, replay = await _buffered(receive)
        presented = dict(scope["headers"]).get(b"authorization", b"")
        authorized = hmac.compare_digest(presented, f"Bearer {self.token}".encode())
        self.received.append(
            {
                "method": scope["method"],
                "path": scope["path"],
                "authorization": presented.decode(errors="replace"),
                "authorized": authorized,
                **_rpc(body),
            }
        )
        if not authorized:
            await JSONResponse({"error": "missing or wrong bearer token"}, 401)(scope, replay, send)
            return
        await self.app(scope, replay, send)


async def _buffered(receive: Any) -> tuple[bytes, Any]:
    """The request body, and a ``receive`` that hands it on unchanged."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def _rpc(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except ValueError:
        return {"rpc": None, "tool": None}
    if not isinstance(message, dict):
        return {"rpc": "batch", "tool": None}
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    return {"rpc": message.get("method"), "tool": params.get("name")}


def create_app(token: str, host: str = "127.0.0.1") -> Research:
    """The research service; ``token`` is the bearer token it accepts, ``host`` where it
    listens (the SDK guards against DNS rebinding on a loopback host)."""
    if not token:
        raise ValueError("a bearer token is required")
    app = research_server().streamable_http_app(json_response=True, stateless_http=True, host=host)
    return Research(app, token)


def main() -> None:
    token = os.environ.get("RESEARCH_API_TOKEN", "")
    if not token:
        raise SystemExit("RESEARCH_API_TOKEN is not set")
    host, port = "0.0.0.0", int(os.environ.get("PORT", "4200"))
    uvicorn.run(create_app(token, host), host=host, port=port, log_level="warning")


if __name__ == "__main__":
    main()
