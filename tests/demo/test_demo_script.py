"""scripts/demo.sh, run as a newcomer runs it: offline, no keys, one command.

It must show an executed tool call, the final answer, an order held for an approval that the
operator gives, and a verified audit chain; stay within 100 columns, print no credential, and
leave nothing running when it ends.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[2]
KEY_VARIABLES = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "TRADING_RO_TOKEN",
    "TRADING_RW_TOKEN",
    "NEWS_API_KEY",
    "RESEARCH_API_TOKEN",
    "CLAW_OPERATOR_TOKEN",
)


def offline_env() -> dict[str, str]:
    """This environment without any provider key or credential, and with proxies that lead
    nowhere, so that nothing in the demo can depend on a network or a key."""
    env = {k: v for k, v in os.environ.items() if k not in KEY_VARIABLES}
    dead = "http://127.0.0.1:9"
    env.update(HTTP_PROXY=dead, HTTPS_PROXY=dead, http_proxy=dead, https_proxy=dead)
    return env


def refuses_connections(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=2):
            return False
    except OSError:
        return True


def test_the_demo_runs_the_main_job_and_verifies_the_audit() -> None:
    done = subprocess.run(
        ["bash", "scripts/demo.sh"],
        cwd=REPO,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    analyst, _, trader = out.partition('Agent "trader"')
    # The analyst's call, and the HTTP request the sidecar made for it with the read-only token.
    assert 'trading-api_get_quote({"symbol": "NVDA"})' in analyst
    quote = re.search(r"GET http://127\.0\.0\.1:\d+/api/v1/quotes/NVDA\n(.*\n){1,3}", analyst)
    assert quote is not None, analyst
    assert "Authorization: Bearer <$TRADING_RO_TOKEN: masked>" in quote.group(0)
    assert '-> 200 {"symbol": "NVDA", "price": 121.4' in quote.group(0)
    assert "TRADING_RW_TOKEN" not in analyst
    # The MCP service's tool, called by the sidecar over MCP with its own credential.
    assert 'research-mcp_get_fundamentals({"symbol": "NVDA"})' in analyst
    assert re.search(r"POST http://127\.0\.0\.1:\d+/mcp  \(MCP tools/call get_fundamentals\)", out)
    assert "Authorization: Bearer <$RESEARCH_API_TOKEN: masked>" in analyst
    # The final answer, built from the tool results, as the agent printed it.
    assert "(scripted demo model) From your tools:" in analyst
    assert "- trading-api_get_quote: symbol NVDA, price 121.4, currency USD" in analyst
    assert "- research-mcp_get_fundamentals: symbol NVDA, sector Semiconductors" in analyst
    # The trader's order: held, listed, approved by the operator, then run with the trading token.
    assert 'trading-api_execute_trade({"symbol": "NVDA", "side": "buy", "quantity": 10})' in trader
    pending = re.findall(r"(apr_\w+)  pending  trader  trading-api\.execute_trade", trader)
    assert len(pending) == 1, trader
    assert f"$ clawc approvals approve {pending[0]} --sidecar http://127.0.0.1:" in trader
    assert f"{pending[0]}: approved" in trader
    orders = re.findall(r"POST http://127\.0\.0\.1:\d+/api/v1/trades\n(?:.*\n){1,4}", trader)
    assert len(orders) == 1, trader
    assert "Authorization: Bearer <$TRADING_RW_TOKEN: masked>" in orders[0]
    assert "Idempotency-Key: " in orders[0]  # native calls carry one too (SPEC §8.2)
    assert '-> 201 {"id": "T0001", "symbol": "NVDA", "side": "buy"' in orders[0]
    assert "- trading-api_execute_trade: id T0001, symbol NVDA, side buy" in trader
    # The audit: both agents' calls and the approval's decision, then verified chains.
    assert "round 1: trading-api.get_quote -> ok 200" in out
    assert "round 1: research-mcp.get_fundamentals -> ok" in out
    assert "approval_decided" in out
    assert out.count("round 1: trading-api.execute_trade -> ok 201") == 1
    assert "audit/analyst.jsonl: 1 records, chain intact\n" in out
    assert re.search(r"audit/trader\.jsonl: \d+ records, chain intact\n", out)
    assert out.rstrip().endswith("OK")
    for prefix in (
        "provider-key",
        "trading-read",
        "trading-write",
        "research",
        "operator",
        "audit",
    ):
        assert f"demo-{prefix}-" not in out + done.stderr
    wide = [line for line in out.splitlines() if len(line) > 100]
    assert not wide, wide


def test_stopping_the_demo_stops_the_sidecar_it_started() -> None:
    demo = subprocess.Popen(
        ["bash", "scripts/demo.sh"],
        cwd=REPO,
        env=offline_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert demo.stdout is not None
        sidecar_url = None
        for line in demo.stdout:
            if match := re.search(r"sidecar listening on (http://\S+);", line):
                sidecar_url = match.group(1)
                break
        assert sidecar_url is not None, "the demo never started its sidecar"
        demo.send_signal(signal.SIGINT)  # what Ctrl-C sends; the demo may also be done already
        demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert refuses_connections(sidecar_url)
