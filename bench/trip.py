"""The trip of one mediated request: which sidecar modules control passes through, and how often.

    .venv/bin/python -m bench.trip                 # one OpenAI request, one read-only tool round
    .venv/bin/python -m bench.trip --rounds 0      # no tool round
    .venv/bin/python -m bench.trip --profile 2000  # cProfile over 2000 requests: the fixed cost
    .venv/bin/python -m bench.trip --cpu 2000      # CPU per request, client and stubs included
    .venv/bin/python -m bench.trip --agent bench-native --workload anthropic_to_chat --profile 2000

Everything runs in this process on 127.0.0.1: the bench's scripted upstream and tool service and
a real sidecar serving the bench build. A first request warms every cache; the second is traced
with ``sys.setprofile`` (every thread). Control "is in" the sidecar module of the innermost
sidecar frame: a library frame (aiohttp, orjson, asyncio) counts for the sidecar module that
called it. A *stay* is a run of consecutive events in one module; a *room* is a module entered at
all. The figures are counts, not times, so they are the same on any machine.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import aiohttp
from aiohttp import web

from bench import toolservice, upstream, workloads
from bench.run import ANTHROPIC_MODEL, RESPONSES_MODEL, TRANSLATED_MODEL, write_bench_build

PACKAGE = "clawpod.sidecar."
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}
# The caller's protocol -> its route, the body maker (model, stream), its extra headers.
CALLERS: dict[str, tuple[str, Callable[..., bytes], dict[str, str]]] = {
    "chat": ("/v1/chat/completions", workloads.openai_chat, {}),
    "messages": ("/v1/messages", workloads.anthropic_messages, ANTHROPIC_HEADERS),
    "responses": ("/v1/responses", workloads.responses_request, {}),
}
# Workload -> the caller's protocol and the model it asks for (None: the scripted one the
# rounds pick), which names the provider; ``*_to_*`` ones are translated (contract §18), to be
# compared with the same caller's pass-through.
WORKLOADS: dict[str, tuple[str, str | None]] = {
    "openai": ("chat", None),
    "anthropic": ("messages", ANTHROPIC_MODEL),
    "responses": ("responses", RESPONSES_MODEL),
    "anthropic_to_chat": ("messages", TRANSLATED_MODEL),
    "responses_to_chat": ("responses", TRANSLATED_MODEL),
    "responses_to_messages": ("responses", ANTHROPIC_MODEL),
    "chat_to_responses": ("chat", RESPONSES_MODEL),
    "anthropic_to_responses": ("messages", RESPONSES_MODEL),
    "chat_to_messages": ("chat", ANTHROPIC_MODEL),
}


def request_for(workload: str, rounds: int, stream: bool) -> tuple[str, bytes, dict[str, str]]:
    """The workload's route, body and extra headers."""
    caller, model = WORKLOADS[workload]
    route, make_body, extra = CALLERS[caller]
    return route, make_body(model or f"gpt-bench-r{rounds}", stream=stream), extra


class Trip:
    """The sequence of sidecar modules control is in, one entry per change."""

    def __init__(self) -> None:
        self.stays: list[str] = []

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event not in ("call", "return"):
            return
        if event == "return":
            frame = frame.f_back  # control goes back to the caller
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if module.startswith(PACKAGE):
                if not self.stays or self.stays[-1] != module:
                    self.stays.append(module)
                return
            frame = frame.f_back

    def report(self) -> str:
        rooms = Counter(self.stays)
        lines = [f"{len(self.stays)} stays in {len(rooms)} sidecar modules", ""]
        lines += [f"{n:5}  {module.removeprefix(PACKAGE)}" for module, n in rooms.most_common()]
        return "\n".join(lines)


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def run(
    rounds: int, agent: str, profile: int, stream: bool, cpu: int = 0, workload: str = "openai"
) -> str:
    from tests.support.sidecar import start_sidecar

    stubs = [await _serve(upstream.make_app()), await _serve(toolservice.make_app())]
    try:
        with tempfile.TemporaryDirectory(prefix="clawpod-trip-") as scratch:
            root = Path(scratch)
            tokens = write_bench_build(root / "build", stubs[0][1], stubs[1][1])
            sidecar = await start_sidecar(root / "build", root / "state")
            route, body, extra = request_for(workload, rounds, stream)
            headers = {**extra, "Authorization": f"Bearer {tokens[agent]}"}
            url = sidecar.url + route
            async with sidecar, aiohttp.ClientSession() as client:

                async def ask() -> None:
                    async with client.post(url, data=body, headers=headers) as response:
                        await response.read()
                        assert response.status == 200, response.status

                await ask()  # warm: imports, pools, caches
                if profile:
                    return await _profiled(ask, profile)
                if cpu:
                    return await _cpu(ask, cpu)
                trip = Trip()
                threading.setprofile(trip)
                sys.setprofile(trip)
                try:
                    await ask()
                finally:
                    sys.setprofile(None)
                    threading.setprofile(None)  # type: ignore[arg-type]
                return trip.report()
    finally:
        for runner, _ in stubs:
            await runner.cleanup()


async def _profiled(ask: Any, requests: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(requests):
        await ask()
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(40)
    return f"profiled {requests} requests (client and stubs included)"


async def _cpu(ask: Any, requests: int) -> str:
    """Process CPU per request: sidecar, client and stubs share this process, so compare two
    kinds of request (mediated with pass-through), never the figure with the bench's."""
    started = time.process_time()
    for _ in range(requests):
        await ask()
    spent = time.process_time() - started
    return f"{1000 * spent / requests:.3f} ms CPU per request ({requests}, in-process)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="scripted tool rounds")
    parser.add_argument(
        "--agent",
        default="bench-mediated",
        choices=["bench-mediated", "bench-mediated-write", "bench-native"],
    )
    parser.add_argument("--stream", action="store_true", help="the client streams")
    parser.add_argument(
        "--workload", default="openai", choices=WORKLOADS, help="the caller's protocol and model"
    )
    parser.add_argument("--profile", type=int, default=0, help="cProfile over N requests")
    parser.add_argument("--cpu", type=int, default=0, help="CPU per request over N requests")
    args = parser.parse_args(argv)
    print(
        asyncio.run(
            run(args.rounds, args.agent, args.profile, args.stream, args.cpu, args.workload)
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
