"""scripts/demo.sh, run as a newcomer runs it: offline, no keys, one command.

It must show an executed tool call, the final answer and a verified audit chain, stay within
100 columns, print no credential, and leave nothing running when it ends.
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
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TRADING_API_TOKEN", "NEWS_API_KEY")


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
    # The model's call, and the HTTP request the sidecar made for it, with its answer.
    assert 'trading-api_get_quote({"symbol": "NVDA"})' in out
    assert re.search(r"GET http://127\.0\.0\.1:\d+/api/v1/quotes/NVDA\n", out)
    assert "Authorization: Bearer <$TRADING_API_TOKEN: masked>" in out
    assert '-> 200 {"symbol": "NVDA", "price": 121.4' in out
    # The final answer, built from the tool result, as the agent printed it.
    assert "(scripted demo model) From your tools:" in out
    assert "- trading-api_get_quote: symbol NVDA, price 121.4, currency USD" in out
    # The audit: the request with its tool call, then a verified chain.
    assert "round 1: trading-api.get_quote -> ok 200" in out
    assert "audit/analyst.jsonl: 1 records, chain intact\n" in out
    assert out.rstrip().endswith("OK")
    assert "demo-trading-token-" not in out + done.stderr
    assert "demo-provider-key-" not in out + done.stderr
    assert "demo-audit-key-" not in out + done.stderr
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
