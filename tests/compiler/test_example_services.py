"""The example pod's tool services: real aiohttp apps other tests use as tool services."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from tests.support.example_apps import example_app

trading = example_app("trading-api")
news = example_app("market-news")


async def client_for(app) -> TestClient:
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


async def test_trading_api_requires_its_bearer_token() -> None:
    client = await client_for(trading.create_app("s3cret"))
    try:
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/api/v1/quotes/NVDA")).status == 401
        wrong = await client.get("/api/v1/quotes/NVDA", headers={"Authorization": "Bearer nope"})
        assert wrong.status == 401
        right = await client.get("/api/v1/quotes/nvda", headers={"Authorization": "Bearer s3cret"})
        assert right.status == 200 and (await right.json())["symbol"] == "NVDA"
    finally:
        await client.close()


async def test_the_read_only_token_reads_and_only_the_trading_token_trades() -> None:
    app = trading.create_app("read-s3cret", "trade-s3cret")
    client = await client_for(app)
    read, trade = ({"Authorization": f"Bearer {t}"} for t in ("read-s3cret", "trade-s3cret"))
    order = {"trade": {"symbol": "NVDA", "side": "buy", "quantity": 1}}
    try:
        assert (await client.get("/api/v1/quotes/NVDA", headers=read)).status == 200
        refused = await client.post("/api/v1/trades", json=order, headers=read)
        assert refused.status == 403 and "read-only" in (await refused.json())["error"]
        assert (await client.delete("/api/v1/trades/T0001", headers=read)).status == 403
        assert (await client.post("/api/v1/trades", json=order, headers=trade)).status == 201
        assert (await client.get("/api/v1/trades", headers=trade)).status == 200
        assert [r["token"] for r in app[trading.RECEIVED]] == [
            "read-only",
            "read-only",
            "read-only",
            "trading",
            "trading",
        ]
        assert len((await (await client.get("/api/v1/trades", headers=read)).json())["trades"]) == 1
    finally:
        await client.close()


async def test_trading_flow_updates_positions_and_can_be_cancelled() -> None:
    app = trading.create_app("t")
    client = await client_for(app)
    auth = {"Authorization": "Bearer t"}
    try:
        placed = await client.post(
            "/api/v1/trades",
            json={"trade": {"symbol": "NVDA", "side": "buy", "quantity": 10}},
            headers=auth,
        )
        assert placed.status == 201
        trade = await placed.json()
        context = await (await client.get("/api/v1/market_context/analyst", headers=auth)).json()
        assert context["agent"] == "analyst"
        assert context["positions"] == [{"symbol": "NVDA", "quantity": 10, "market_value": 1214.0}]
        assert context["balance"] == 100_000 - 1214.0
        listed = await (
            await client.get("/api/v1/trades", params={"limit": "5"}, headers=auth)
        ).json()
        assert [t["id"] for t in listed["trades"]] == [trade["id"]]
        cancelled = await client.delete(f"/api/v1/trades/{trade['id']}", headers=auth)
        assert (await cancelled.json())["status"] == "cancelled"
        again = await client.delete(f"/api/v1/trades/{trade['id']}", headers=auth)
        assert again.status == 409
        assert (
            app[trading.RECEIVED][0]["body"]
            == '{"trade": {"symbol": "NVDA", "side": "buy", "quantity": 10}}'
        )
    finally:
        await client.close()


async def test_trading_api_rejects_bad_orders() -> None:
    client = await client_for(trading.create_app("t"))
    auth = {"Authorization": "Bearer t"}
    try:
        cases = [
            ({"symbol": "NVDA", "side": "buy"}, 400),
            ({"symbol": "ZZZZ", "side": "buy", "quantity": 1}, 404),
            ({"symbol": "NVDA", "side": "hold", "quantity": 1}, 400),
            ({"symbol": "NVDA", "side": "buy", "quantity": 10_000}, 422),
            ({"symbol": "NVDA", "side": "sell", "quantity": 1}, 422),
        ]
        for order, status in cases:
            response = await client.post("/api/v1/trades", json={"trade": order}, headers=auth)
            assert response.status == status, order
            assert "error" in await response.json()
    finally:
        await client.close()


async def test_market_news_uses_header_auth() -> None:
    client = await client_for(news.create_app("k"))
    try:
        assert (await client.get("/api/news", params={"query": "nvda"})).status == 401
        found = await client.get("/api/news", params={"query": "nvda"}, headers={"X-News-Key": "k"})
        articles = (await found.json())["articles"]
        assert [a["id"] for a in articles] == ["N-1001"]
        article = await client.get("/api/news/N-1001", headers={"X-News-Key": "k"})
        assert "body" in await article.json()
        first = await client.post(
            "/api/alerts", json={"symbol": "tsla"}, headers={"X-News-Key": "k"}
        )
        second = await client.post(
            "/api/alerts", json={"symbol": "TSLA"}, headers={"X-News-Key": "k"}
        )
        assert await first.json() == await second.json()
    finally:
        await client.close()
