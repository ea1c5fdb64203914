"""The example agent (compose/examples/trading-desk/agent/run.py) when its model request fails:
one request (so one audit record), one clear line, no traceback."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tests.support.example_apps import EXAMPLE_DIR

UNREACHABLE = {
    "error": {
        "message": "provider 'openai' is unreachable",
        "type": "upstream_error",
        "code": "upstream_unreachable",
    }
}


@pytest.fixture
async def failing_sidecar() -> AsyncIterator[tuple[str, list[str]]]:
    """Stands in for a sidecar whose provider is down: every request gets a 502."""
    seen: list[str] = []

    async def fail(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response(UNREACHABLE, status=502)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", fail)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", seen
    finally:
        await runner.cleanup()


async def test_a_failed_model_request_is_one_request_and_one_line(
    failing_sidecar: tuple[str, list[str]],
) -> None:
    url, seen = failing_sidecar
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
    env.update(OPENAI_BASE_URL=url, OPENAI_API_KEY="claw_agent_token_for_tests")
    agent = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE_DIR / "agent" / "run.py"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(agent.communicate(), 60)
    assert agent.returncode == 1
    assert out == b""
    assert err.decode() == (
        "agent: the model request failed: "
        "HTTP 502 (upstream_unreachable): provider 'openai' is unreachable\n"
    )
    assert seen == ["/v1/chat/completions"]
