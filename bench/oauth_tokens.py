"""What a cached OAuth token adds to a tool call (SPEC §21: ≤ 0.05 ms CPU per call): the same
HTTP tool called through the executor with a static bearer credential and with an OAuth
client-credentials token already cached, interleaved in rounds so both see the same noise, CPU
seconds of this process per call (``time.process_time``: the tool service, on 127.0.0.1, runs
in this process too, so each figure is a whole call; the difference is what the token adds);
and the cached path alone (the token looked up, the request made to carry it), 100,000 times.
The token is fetched once, from the suite's authorization server, before the rounds.

    python -m bench.oauth_tokens [--calls N] [--rounds N] [--output FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from clawpod.sidecar.backends.http import build_request, with_bearer
from clawpod.sidecar.execution.executor import CallLimits, ToolExecutor
from clawpod.sidecar.manifest import ManagedTool, ToolAuth
from tests.support.authorization_server import running_authorization_server
from tests.support.builds import http_tool

SECRET = "bench-client-secret-1"


async def _tool_service() -> tuple[web.AppRunner, str]:
    async def lookup(request: web.Request) -> web.Response:
        return web.json_response({"q": request.match_info["q"], "price": 101.5})

    app = web.Application()
    app.router.add_get("/lookup/{q}", lookup)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def _cpu_per_call(executor: ToolExecutor, tool: ManagedTool, calls: int) -> float:
    checked = executor.check(tool, {"q": "ACME"})
    assert not isinstance(checked, ManagedTool)
    limits = CallLimits(5.0, 65536)
    started = time.process_time()
    for _ in range(calls):
        outcome = await executor.execute("bench", checked, limits, shielded=True)
        assert outcome.error_code is None, outcome.envelope
    return (time.process_time() - started) / calls


async def measure(token_url: str, calls: int, rounds: int) -> dict[str, Any]:
    runner, base_url = await _tool_service()
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    static = http_tool(
        "quotes",
        "lookup",
        base_url,
        path="/lookup/{q}",
        schema=schema,
        auth=ToolAuth(type="bearer", env="STATIC_TOKEN"),
    )
    oauth = http_tool(
        "quotes",
        "lookup",
        base_url,
        path="/lookup/{q}",
        schema=schema,
        auth=ToolAuth.model_validate(
            {
                "type": "oauth2-client-credentials",
                "token-url": token_url,
                "client-id-env": "CLIENT_ID",
                "client-secret-env": "CLIENT_SECRET",
                "scopes": ["quotes.read"],
            }
        ),
    )
    env = {"STATIC_TOKEN": "static-bench-token", "CLIENT_ID": "bench", "CLIENT_SECRET": SECRET}
    executor = ToolExecutor(env=env)
    await executor.start()
    try:
        for tool in (static, oauth):  # warm: connections, validators, the token fetched once
            await _cpu_per_call(executor, tool, 200)
        isolated = await _cpu_of_cached_path(executor, oauth, 100_000)
        pairs = []
        for _ in range(rounds):
            pairs.append(
                (
                    await _cpu_per_call(executor, static, calls),
                    await _cpu_per_call(executor, oauth, calls),
                )
            )
    finally:
        await executor.close()
        await runner.cleanup()
    added = [oauth_s - static_s for static_s, oauth_s in pairs]
    return {
        "calls_per_round": calls,
        "rounds": rounds,
        "static_bearer_cpu_ms_per_call": round(statistics.median(p[0] for p in pairs) * 1000, 4),
        "oauth_cached_cpu_ms_per_call": round(statistics.median(p[1] for p in pairs) * 1000, 4),
        "added_cpu_ms_per_call_median": round(statistics.median(added) * 1000, 4),
        "added_cpu_ms_per_call_each_round": [round(a * 1000, 4) for a in added],
        "cached_token_and_header_cpu_ms_isolated": round(isolated * 1000, 5),
    }


async def _cpu_of_cached_path(executor: ToolExecutor, tool: ManagedTool, times: int) -> float:
    """The cached path alone: the token looked up and the request made to carry it."""
    checked = executor.check(tool, {"q": "ACME"})
    assert not isinstance(checked, ManagedTool)
    prepared = executor._prepare(tool)
    request = build_request(
        tool, prepared.path_parts, prepared.base_url, "bench", checked.arguments, {}
    )
    auth = tool.execution.auth
    started = time.process_time()
    for _ in range(times):
        with_bearer(request, await executor.tokens.token(auth, None, timeout_s=5.0))
    return (time.process_time() - started) / times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    with running_authorization_server() as server:
        server.add_client("bench", SECRET, scopes=("quotes.read",))
        figures = asyncio.run(measure(server.token_url, args.calls, args.rounds))
    text = json.dumps(figures, indent=2)
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n")
    sys.exit(0)


if __name__ == "__main__":
    main()
