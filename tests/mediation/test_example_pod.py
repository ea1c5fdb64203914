"""The example trading desk, compiled by clawc, mediated end to end against its real service."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from aiohttp import web

from clawpod.cli.clawc import main as clawc
from clawpod.sidecar.manifest import ManagedTool, load_build
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.example_apps import EXAMPLE_DIR, example_app
from tests.support.sidecar import TEST_PROVIDER_KEYS, start_sidecar
from tests.support.upstream import Reply, StubUpstream

READ_TOKEN = "desk-read-token-for-tests"
TOKEN = "desk-trading-token-for-tests"


@pytest.fixture
async def trading_api() -> AsyncIterator[tuple[str, web.Application]]:
    app = example_app("trading-api").create_app(READ_TOKEN, TOKEN)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", app
    await runner.cleanup()


def compiled_trader_tools(tmp_path: Path, base_url: str) -> list[ManagedTool]:
    out = tmp_path / "compiled"
    quiet = io.StringIO()
    assert clawc(["compile", str(EXAMPLE_DIR / "pod.yml"), "-o", str(out)], quiet, quiet) == 0
    tools = load_build(out).agents["trader"].tools.tools
    return [
        tool.model_copy(
            update={"execution": tool.execution.model_copy(update={"base_url": base_url})}
        )
        for tool in tools
        if tool.execution.service == "trading-api"
    ]


async def test_the_trader_buys_through_the_sidecar(
    tmp_path: Path, trading_api: tuple[str, web.Application]
) -> None:
    url, app = trading_api
    tools = compiled_trader_tools(tmp_path, url)
    async with StubUpstream() as upstream:
        tokens = write_build(
            tmp_path / "build", [AgentSpec("trader", tools)], providers_for(upstream.openai_url)
        )
        # The trader's grant names the desk-trader principal: its calls use the trading token.
        env = {**TEST_PROVIDER_KEYS, "TRADING_RO_TOKEN": READ_TOKEN, "TRADING_RW_TOKEN": TOKEN}
        sidecar = await start_sidecar(tmp_path / "build", tmp_path / "state", env=env)
        trade = {"symbol": "NVDA", "side": "buy", "quantity": 10}
        upstream.enqueue(
            "openai",
            Reply.json(
                oa_calls(
                    ("c1", "trading-api_get_market_context", {}),
                    ("c2", "trading-api_get_quote", {"symbol": "NVDA"}),
                )
            ),
            Reply.json(oa_calls(("c3", "trading-api_execute_trade", trade))),
            Reply.json(oa_text("Bought 10 NVDA.")),
        )
        client = openai.AsyncOpenAI(
            base_url=sidecar.openai_base_url, api_key=tokens["trader"], max_retries=0
        )
        try:
            completion = await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": "Buy 10 NVDA if you can."}],
            )
            sent = [r.json for r in upstream.requests_to("openai")]
        finally:
            await client.close()
            await sidecar.close()
    assert completion.choices[0].message.content == "Bought 10 NVDA."
    received: list[dict[str, Any]] = app[example_app("trading-api").RECEIVED]
    reads = sorted((r["method"], r["path"]) for r in received[:2])  # concurrent: any order
    assert reads == [("GET", "/api/v1/market_context/trader"), ("GET", "/api/v1/quotes/NVDA")]
    assert (received[2]["method"], received[2]["path"]) == ("POST", "/api/v1/trades")
    assert [r["token"] for r in received] == ["trading"] * 3
    assert orjson.loads(received[-1]["body"]) == {"trade": trade}
    results = [orjson.loads(m["content"]) for m in sent[2]["messages"] if m["role"] == "tool"]
    assert [r["status"] for r in results] == [200, 200, 201]
    assert results[1]["data"]["symbol"] == "NVDA"
    assert results[2]["data"]["status"] == "filled"
    assert TOKEN not in str(sent) and READ_TOKEN not in str(sent)
