"""The bench upstream's pacing (``bench.ab --paced``): every stream of a paced stub pauses after
each chunk, and carries the same bytes as the instant stub's."""

from __future__ import annotations

import aiohttp
from aiohttp.test_utils import TestServer

from bench import upstream


def test_a_paced_stub_pauses_every_stream_but_the_models_that_script_their_own():
    assert upstream._pacing("gpt-bench", 0.001) == (0.001, 0.001)
    assert upstream._pacing("gpt-bench", 0.0) == (0.0, 0.0)
    slow = upstream.SLOW_CHUNK_INTERVAL_S
    assert upstream._pacing("gpt-bench-slow", 0.001) == (slow, slow)
    assert upstream._pacing("gpt-bench-gap", 0.001) == (upstream.FIRST_CHUNK_GAP_S, 0.0)


async def stream_of(pause_s: float) -> bytes:
    body = {"model": "gpt-bench", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with TestServer(upstream.make_app(pause_s)) as server, aiohttp.ClientSession() as http:
        response = await http.post(server.make_url("/v1/chat/completions"), json=body)
        assert response.status == 200
        return await response.read()


async def test_a_paced_stream_carries_the_instant_streams_bytes():
    instant = await stream_of(0.0)
    assert instant.count(b"data: ") > 100
    assert await stream_of(0.0005) == instant
