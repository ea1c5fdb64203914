"""Market news feed: headlines and articles, authenticated by an ``X-News-Key`` header.

Routes (all but /healthz need ``X-News-Key: <NEWS_API_KEY>``):
  GET  /healthz
  GET  /api/news?query=TEXT&limit=N    newest matching headlines
  GET  /api/news/{article_id}          one article with its body
  POST /api/alerts                     {"symbol", "keyword"}: register an alert (idempotent)

Run: ``NEWS_API_KEY=... python app.py`` (listens on 0.0.0.0:4100, or $PORT).
"""

from __future__ import annotations

import hmac
import os
from typing import Any

from aiohttp import web

ARTICLES = [
    {
        "id": "N-1001",
        "symbol": "NVDA",
        "headline": "NVDA guides data-centre revenue above estimates",
        "body": "The chipmaker raised its outlook on strong accelerator demand.",
    },
    {
        "id": "N-1002",
        "symbol": "AAPL",
        "headline": "AAPL supplier checks point to steady handset builds",
        "body": "Assembly partners report orders in line with last year.",
    },
    {
        "id": "N-1003",
        "symbol": "TSLA",
        "headline": "TSLA deliveries miss consensus for the quarter",
        "body": "Deliveries came in below analyst expectations amid price cuts.",
    },
    {
        "id": "N-1004",
        "symbol": "MSFT",
        "headline": "MSFT cloud growth steady, capex rises",
        "body": "Cloud revenue grew in line while capital spending increased.",
    },
]

KEY = web.AppKey("key", str)
ALERTS = web.AppKey("alerts", dict)
RECEIVED = web.AppKey("received", list)


@web.middleware
async def _authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
    request.app[RECEIVED].append(
        {"method": request.method, "path": request.path, "query": dict(request.query)}
    )
    if request.path != "/healthz":
        presented = request.headers.get("X-News-Key", "")
        if not hmac.compare_digest(presented.encode(), request.app[KEY].encode()):
            return web.json_response({"error": "missing or wrong X-News-Key"}, status=401)
    return await handler(request)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def search(request: web.Request) -> web.Response:
    query = request.query.get("query", "").lower()
    try:
        limit = int(request.query.get("limit", "5"))
    except ValueError:
        return web.json_response({"error": "limit must be an integer"}, status=400)
    hits = [
        {k: a[k] for k in ("id", "symbol", "headline")}
        for a in ARTICLES
        if query in a["headline"].lower() or query == a["symbol"].lower()
    ]
    return web.json_response({"articles": hits[: max(limit, 0)]})


async def article(request: web.Request) -> web.Response:
    for item in ARTICLES:
        if item["id"] == request.match_info["article_id"]:
            return web.json_response(item)
    return web.json_response({"error": "no such article"}, status=404)


async def alert(request: web.Request) -> web.Response:
    try:
        data = await request.json()
        key = (str(data["symbol"]).upper(), str(data.get("keyword", "")))
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": 'expected {"symbol", "keyword"}'}, status=400)
    alerts = request.app[ALERTS]
    alerts.setdefault(key, {"id": f"A{len(alerts) + 1:03d}", "symbol": key[0], "keyword": key[1]})
    return web.json_response(alerts[key])


def create_app(key: str) -> web.Application:
    """The news API; ``key`` is the value it expects in ``X-News-Key``."""
    if not key:
        raise ValueError("an API key is required")
    app = web.Application(middlewares=[_authenticate])
    app[KEY] = key
    app[ALERTS] = {}
    app[RECEIVED] = []
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/news", search)
    app.router.add_get("/api/news/{article_id}", article)
    app.router.add_post("/api/alerts", alert)
    return app


def main() -> None:
    key = os.environ.get("NEWS_API_KEY", "")
    if not key:
        raise SystemExit("NEWS_API_KEY is not set")
    web.run_app(create_app(key), host="0.0.0.0", port=int(os.environ.get("PORT", "4100")))


if __name__ == "__main__":
    main()
