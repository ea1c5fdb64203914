"""Instructions the sidecar executes per request, counted by valgrind: the same on any load.

    .venv/bin/python -m bench.instructions anthropic anthropic_to_chat       # 200 requests each
    .venv/bin/python -m bench.instructions openai chat_to_messages --requests 100 --stream
    .venv/bin/python -m bench.instructions mediated_r1_distinct destructive_r1_distinct
    .venv/bin/python -m bench.instructions openai chat_to_messages --stream --paced 5 --warm 3

CPU time on a shared two-core machine moves by more than a translation costs (bench.ab reads
±0.03 ms run to run), so differences of a few microseconds cannot be seen there. Here the
bench's upstream and the client run in this process, the sidecar (``python -m
clawpod.sidecar`` on the bench build, production settings) under ``valgrind --tool=callgrind``;
after a warm-up, its counters are zeroed, one workload's requests are sent one at a time, and
the counters are dumped (``callgrind_control``): user-space instructions per request, for the
sidecar alone, repeatable to about 1 %. Kernel time (sockets, fsync) is not in the figure, so it
ranks changes to Python code; bench.ab still says what a request costs. Workloads are
``bench.trip``'s (the caller's protocol and the model's provider, pass-through) and the mediated
ones of ``MEDIATED`` (one tool round, read-only or journaled, each request its own); the first is
the base the others are shown over. ``--paced MS`` has the upstream pause after each chunk of a
stream (``bench.ab --paced``): the sidecar reads each event on its own, as from a model streaming
at its pace, where an instant upstream lets it read a stream in the few large pieces its speed
under valgrind makes. Needs valgrind (the Debian package); the sidecar starts in
about a minute under it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from bench import toolservice, upstream, workloads
from bench.processes import free_port
from bench.run import PROVIDER_KEYS, sidecar_command, write_bench_build
from bench.trip import WORKLOADS, _serve, request_for
from clawpod.sidecar.audit.log import AUDIT_KEY_ENV

WARM_REQUESTS = 30
# Mediated workloads (bench.ab's names) -> their agent: one OpenAI request with one tool round,
# read-only or with side effects (journaled), each request its own (not a retry of the last).
MEDIATED = {
    "mediated_r1_distinct": "bench-mediated",
    "destructive_r1_distinct": "bench-mediated-write",
}
READY_TIMEOUT_S = 300


def _total(dump: Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


async def _wait_ready(client: aiohttp.ClientSession, url: str, sidecar: subprocess.Popen) -> None:
    for _ in range(READY_TIMEOUT_S * 2):
        if sidecar.poll() is not None:
            raise RuntimeError("the sidecar exited under valgrind")
        try:
            async with client.get(url + "/healthz"):
                return
        except aiohttp.ClientError:
            await asyncio.sleep(0.5)
    raise RuntimeError("the sidecar did not start")


async def measure(
    workloads: list[str],
    requests: int,
    stream: bool,
    pause_s: float = 0.0,
    warm: int = WARM_REQUESTS,
) -> dict[str, float]:
    """Instructions per request of each workload, in order, on one sidecar, after ``warm``
    requests of each; ``pause_s``: the upstream's after each stream chunk."""
    stubs = [await _serve(upstream.make_app(pause_s)), await _serve(toolservice.make_app())]
    scratch = Path(tempfile.mkdtemp(prefix="clawpod-instructions-"))
    out = scratch / "callgrind.out"
    tokens = write_bench_build(scratch / "build", stubs[0][1], stubs[1][1])
    port = free_port()
    command = sidecar_command(scratch / "build", scratch / "state", free_port())
    env = {**os.environ, **PROVIDER_KEYS, AUDIT_KEY_ENV: secrets.token_hex(32)}
    sidecar = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        + [part.replace("{port}", str(port)) for part in command],
        env={**env, "PYTHONHASHSEED": "0"},  # the same dict layouts in every run
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    found: dict[str, float] = {}
    try:
        async with aiohttp.ClientSession() as client:
            await _wait_ready(client, url, sidecar)
            asks = {name: _asker(client, url, tokens, name, stream) for name in workloads}
            for ask in asks.values():
                for _ in range(warm):
                    await ask()
            for name, ask in asks.items():
                _control("--zero", str(sidecar.pid))
                for _ in range(requests):
                    await ask()
                await asyncio.sleep(0.3)  # the audit write of the last request
                before = set(scratch.glob("callgrind.out*"))
                _control("--dump", str(sidecar.pid))
                (dump,) = set(scratch.glob("callgrind.out*")) - before
                found[name] = _total(dump) / requests
    finally:
        sidecar.terminate()
        sidecar.wait()
        for runner, _ in stubs:
            await runner.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)
    return found


def _asker(
    client: aiohttp.ClientSession, url: str, tokens: dict[str, str], workload: str, stream: bool
) -> Callable[[], Awaitable[None]]:
    if workload in MEDIATED:
        route, extra, agent = "/v1/chat/completions", {}, MEDIATED[workload]
        body = workloads.openai_chat("gpt-bench-r1", stream=stream, distinct=True)
    else:
        (route, body, extra), agent = request_for(workload, 0, stream), "bench-native"
    headers = {**extra, "Authorization": f"Bearer {tokens[agent]}"}
    sent = iter(range(1, 1 << 62))

    async def ask() -> None:
        own = body.replace(workloads.REQUEST_NUMBER.encode(), str(next(sent)).encode())
        async with client.post(url + route, data=own, headers=headers) as response:
            await response.read()
            if response.status != 200:
                raise RuntimeError(f"{workload}: HTTP {response.status}")

    return ask


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+", choices=[*WORKLOADS, *MEDIATED], metavar="WORKLOAD")
    parser.add_argument("--requests", type=int, default=200, help="requests per workload")
    parser.add_argument("--stream", action="store_true", help="the client streams")
    parser.add_argument(
        "--paced", type=float, default=0.0, metavar="MS", help="upstream pause per stream chunk"
    )
    parser.add_argument(
        "--warm", type=int, default=WARM_REQUESTS, help="warm-up requests per workload"
    )
    args = parser.parse_args(argv)
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    found = asyncio.run(
        measure(args.workloads, args.requests, args.stream, args.paced / 1000, args.warm)
    )
    base = found[args.workloads[0]]
    for name, count in found.items():
        over = "" if name == args.workloads[0] else f"  ({(count - base) / 1000:+.1f}k over)"
        print(f"{name:20s} {count / 1000:8.1f}k instructions per request{over}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
