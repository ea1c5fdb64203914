"""Measure the sidecar's CPU cost of one mediated round (SPEC 6: <= 1.5 ms per round).

Runs ``python -m sidecar`` as its own process against an instant stub upstream and an instant
tool service (both in this process), sends sequential mediated requests with 0 and with K tool
rounds, and reads the sidecar's process CPU time from /proc. Prints CPU per request and the
marginal CPU per round (one model call + one tool call)::

    .venv/bin/python -m tests.mediation.round_cost [--requests 400] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

import aiohttp

from tests.mediation.conftest import TRADING_TOKEN, desk_tools
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS
from tests.support.upstream import Reply, StubUpstream


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(requests: int, rounds: int) -> None:
    async with StubUpstream() as upstream, ToolService() as service:
        service.reply(None, json={"price": 1})
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch) / "build"
            tokens = write_build(
                root,
                [AgentSpec("analyst", desk_tools(service.url))],
                providers_for(upstream.openai_url),
            )
            env = {**os.environ, **TEST_PROVIDER_KEYS, "TRADING_TOKEN": TRADING_TOKEN}
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "sidecar", "--build", str(root), "--host", "127.0.0.1",
                "--port", "0", "--state-dir", str(Path(scratch) / "state"),
                "--log-level", "WARNING",
                env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            assert process.stdout is not None
            line = (await process.stdout.readline()).decode()
            url = line.split("listening on ", 1)[1].strip().replace("0.0.0.0", "127.0.0.1")
            try:
                async with aiohttp.ClientSession() as session:
                    results = {}
                    for k in (0, rounds):
                        results[k] = await _run(
                            session, url, tokens["analyst"], upstream, process.pid, requests, k
                        )
            finally:
                process.terminate()
                await process.wait()
    base, loaded = results[0], results[rounds]
    print(f"requests per setting: {requests}")
    print(f"CPU per mediated request with 0 rounds: {base * 1000:.3f} ms")
    print(f"CPU per mediated request with {rounds} rounds: {loaded * 1000:.3f} ms")
    print(
        f"CPU per request with 1 round (model call + tool call + final call): "
        f"{(base + (loaded - base) / rounds) * 1000:.3f} ms"
    )
    print(
        f"marginal CPU per round (one model call + one tool call): "
        f"{(loaded - base) / rounds * 1000:.3f} ms"
    )


async def _run(
    session: aiohttp.ClientSession,
    url: str,
    token: str,
    upstream: StubUpstream,
    pid: int,
    requests: int,
    rounds: int,
) -> float:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "price?"}]}
    headers = {"Authorization": f"Bearer {token}"}

    async def one(index: int) -> None:
        replies = [
            Reply.json(oa_calls((f"c{index}_{r}", "desk_quote", {"symbol": f"S{r}"})))
            for r in range(rounds)
        ]
        upstream.enqueue("openai", *replies, Reply.json(oa_text("done")))
        async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status == 200, await r.text()
            await r.read()

    for index in range(20):  # warm up pools and caches
        await one(index)
    before = cpu_seconds(pid)
    for index in range(requests):
        await one(index)
    return (cpu_seconds(pid) - before) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(measure(args.requests, args.rounds))


if __name__ == "__main__":
    main()
