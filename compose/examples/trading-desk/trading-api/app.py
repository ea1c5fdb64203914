"""Trading desk API: an in-memory order book the example agents work against.

Two credentials, as a real broker hands out: a read-only token opens the GET routes, a trading
token opens every route. Routes (all but /healthz need ``Authorization: Bearer <token>``):
  GET    /healthz
  GET    /api/v1/market_context/{agent}   positions, balance and buying power
  GET    /api/v1/quotes/{symbol}          last price of a symbol
  GET    /api/v1/trades?limit=N           most recent trades first
  POST   /api/v1/trades                   {"trade": {"symbol", "side", "quantity"}}
  DELETE /api/v1/trades/{trade_id}        cancel a trade that has not settled

Run: ``TRADING_RO_TOKEN=... TRADING_RW_TOKEN=... python app.py`` (listens on 0.0.0.0:4000, or
$HOST:$PORT). Tests import :func:`create_app` and read ``app[RECEIVED]`` to see what the service was
sent, including which of its tokens each request carried (``"token": "read-only"|"trading"``).
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

PRICES = {"AAPL": 189.50, "MSFT": 411.20, "NVDA": 121.40, "TSLA": 242.80, "SPY": 521.30}
STARTING_CASH = 100_000.0


@dataclass
class Desk:
    cash: float = STARTING_CASH
    positions: dict[str, float] = field(default_factory=dict)
    trades: list[dict[str, Any]] = field(default_factory=list)

    def context(self, agent: str) -> dict[str, Any]:
        value = sum(PRICES[s] * q for s, q in self.positions.items())
        return {
            "agent": agent,
            "balance": round(self.cash, 2),
            "buying_power": round(self.cash, 2),
            "positions": [
                {"symbol": s, "quantity": q, "market_value": round(PRICES[s] * q, 2)}
                for s, q in sorted(self.positions.items())
                if q
            ],
            "portfolio_value": round(self.cash + value, 2),
        }


DESK = web.AppKey("desk", Desk)
RECEIVED = web.AppKey("received", list)
TOKENS = web.AppKey("tokens", dict)
READ_ONLY, TRADING = "read-only", "trading"
READ_METHODS = {"GET", "HEAD"}


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _token_kind(request: web.Request) -> str | None:
    """Which of the service's tokens the request carries (``None``: none of them)."""
    presented = request.headers.get("Authorization", "").encode()
    found = None
    for kind, token in request.app[TOKENS].items():  # every comparison runs: constant time
        if hmac.compare_digest(presented, f"Bearer {token}".encode()):
            found = kind
    return found


@web.middleware
async def _record_and_authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
    body = await request.text() if request.can_read_body else ""
    kind = _token_kind(request)
    request.app[RECEIVED].append(
        {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "body": body,
            "authorized": request.headers.get("Authorization") is not None,
            "token": kind,
        }
    )
    if request.path == "/healthz":
        return await handler(request)
    if kind is None:
        return _error(401, "missing or wrong bearer token")
    if kind == READ_ONLY and request.method not in READ_METHODS:
        return _error(403, "this token is read-only; orders need the trading token")
    return await handler(request)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def market_context(request: web.Request) -> web.Response:
    return web.json_response(request.app[DESK].context(request.match_info["agent"]))


async def quote(request: web.Request) -> web.Response:
    symbol = request.match_info["symbol"].upper()
    if symbol not in PRICES:
        return _error(404, f"unknown symbol {symbol}")
    return web.json_response({"symbol": symbol, "price": PRICES[symbol], "currency": "USD"})


async def list_trades(request: web.Request) -> web.Response:
    try:
        limit = int(request.query.get("limit", "20"))
    except ValueError:
        return _error(400, "limit must be an integer")
    trades = list(reversed(request.app[DESK].trades))[: max(limit, 0)]
    return web.json_response({"trades": trades})


async def execute_trade(request: web.Request) -> web.Response:
    try:
        order = (await request.json())["trade"]
        symbol = str(order["symbol"]).upper()
        side = order["side"]
        quantity = float(order["quantity"])
    except (ValueError, KeyError, TypeError):
        return _error(400, 'expected {"trade": {"symbol", "side", "quantity"}}')
    if symbol not in PRICES:
        return _error(404, f"unknown symbol {symbol}")
    if side not in ("buy", "sell") or quantity <= 0:
        return _error(400, "side must be buy or sell and quantity > 0")
    desk = request.app[DESK]
    cost = PRICES[symbol] * quantity
    held = desk.positions.get(symbol, 0.0)
    if side == "buy" and cost > desk.cash:
        return _error(422, f"insufficient buying power: need {cost:.2f}, have {desk.cash:.2f}")
    if side == "sell" and quantity > held:
        return _error(422, f"cannot sell {quantity:g} {symbol}: position is {held:g}")
    desk.cash += -cost if side == "buy" else cost
    desk.positions[symbol] = held + (quantity if side == "buy" else -quantity)
    trade = {
        "id": f"T{len(desk.trades) + 1:04d}",
        "symbol": symbol,
        "side": side,
        "quantity": quantity,
        "price": PRICES[symbol],
        "status": "filled",
    }
    desk.trades.append(trade)
    return web.json_response(trade, status=201)


async def cancel_trade(request: web.Request) -> web.Response:
    trade_id = request.match_info["trade_id"]
    desk = request.app[DESK]
    for trade in desk.trades:
        if trade["id"] == trade_id:
            if trade["status"] == "cancelled":
                return _error(409, f"trade {trade_id} is already cancelled")
            sign = 1 if trade["side"] == "buy" else -1
            desk.positions[trade["symbol"]] -= sign * trade["quantity"]
            desk.cash += sign * trade["quantity"] * trade["price"]
            trade["status"] = "cancelled"
            return web.json_response(trade)
    return _error(404, f"no trade {trade_id}")


def create_app(read_token: str, trading_token: str | None = None) -> web.Application:
    """The trading API with a fresh desk. ``read_token`` opens the GET routes and
    ``trading_token`` every route; with only one token given, that token opens every route."""
    if not read_token or trading_token == "":
        raise ValueError("a bearer token is required")
    if trading_token == read_token:
        raise ValueError("the read-only and the trading token must differ")
    app = web.Application(middlewares=[_record_and_authenticate])
    app[TOKENS] = (
        {TRADING: read_token}
        if trading_token is None
        else {READ_ONLY: read_token, TRADING: trading_token}
    )
    app[DESK] = Desk()
    app[RECEIVED] = []
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/v1/market_context/{agent}", market_context)
    app.router.add_get("/api/v1/quotes/{symbol}", quote)
    app.router.add_get("/api/v1/trades", list_trades)
    app.router.add_post("/api/v1/trades", execute_trade)
    app.router.add_delete("/api/v1/trades/{trade_id}", cancel_trade)
    return app


def main() -> None:
    read_token = os.environ.get("TRADING_RO_TOKEN", "")
    trading_token = os.environ.get("TRADING_RW_TOKEN", "")
    if not read_token or not trading_token:
        raise SystemExit("set TRADING_RO_TOKEN (read-only) and TRADING_RW_TOKEN (trading)")
    app = create_app(read_token, trading_token)
    web.run_app(
        app, host=os.environ.get("HOST", "0.0.0.0"), port=int(os.environ.get("PORT", "4000"))
    )


if __name__ == "__main__":
    main()
