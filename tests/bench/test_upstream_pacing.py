"""The bench upstream's pacing (``bench.ab --paced``): every stream of a paced stub pauses after
each chunk, and carries the same bytes as the instant stub's."""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
from aiohttp.test_utils import TestServer

from bench import upstream
from bench.processes import free_port, start_server

REPO = Path(__file__).resolve().parents[2]
BODY = {"model": "gpt-bench", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def test_a_paced_stub_pauses_every_stream_but_the_models_that_script_their_own():
    assert upstream._pacing("gpt-bench", 0.001) == (0.001, 0.001)
    assert upstream._pacing("gpt-bench", 0.0) == (0.0, 0.0)
    slow = upstream.SLOW_CHUNK_INTERVAL_S
    assert upstream._pacing("gpt-bench-slow", 0.001) == (slow, slow)
    assert upstream._pacing("gpt-bench-gap", 0.001) == (upstream.FIRST_CHUNK_GAP_S, 0.0)


async def stream_from(url: str) -> bytes:
    async with aiohttp.ClientSession() as http:
        response = await http.post(url + "/v1/chat/completions", json=BODY)
        assert response.status == 200
        return await response.read()


async def stream_of(pause_s: float) -> bytes:
    async with TestServer(upstream.make_app(pause_s)) as server:
        return await stream_from(str(server.make_url("")).rstrip("/"))


async def test_a_paced_stream_carries_the_instant_streams_bytes():
    instant = await stream_of(0.0)
    assert instant.count(b"data: ") > 100
    assert await stream_of(0.0005) == instant


async def test_the_stub_process_takes_its_pause_as_bench_run_passes_it(tmp_path: Path):
    """``python -m bench.upstream --pause-ms`` (what ``Bench.start`` runs for ``--paced``)
    starts and streams."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.upstream", "--port", str(port), "--pause-ms", "0.5"]
    server = start_server("upstream", argv, port, tmp_path, cwd=REPO)
    try:
        assert await stream_from(server.url()) == await stream_of(0.0)
    finally:
        server.stop()
