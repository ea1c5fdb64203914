"""Concurrency-1 latency with the targets interleaved request by request.

On a shared machine, back-to-back blocks of measurements (first direct, then the proxies) see
different background load, and the differences between them (the "added latency" the targets
are about) drown in it. Here one client sends one request to each target in turn, rotating the
order every round, so every target sees the same noise; the added latency of a proxy is its
percentile minus the direct percentile over the same rounds.

The client is an aiohttp session per target with one keep-alive connection. Its own cost is
the same for every target, so it cancels out of the differences.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import uvloop

from bench.streamclient import STREAM_ENDINGS, read_timed, summarize_ms


@dataclass(frozen=True)
class Endpoint:
    url: str
    headers: dict[str, str]
    body: bytes


async def _one(session: aiohttp.ClientSession, endpoint: Endpoint) -> tuple[float, float]:
    """(time to first body bytes, time to the end of the body) in ms; raises on a bad answer."""
    started = time.perf_counter()
    async with session.post(endpoint.url, data=endpoint.body, headers=endpoint.headers) as response:
        first_at, finished, tail = await read_timed(response)
        if response.status != 200:
            raise RuntimeError(f"{endpoint.url} answered {response.status}")
        if response.content_type == "text/event-stream" and not tail.endswith(STREAM_ENDINGS):
            raise RuntimeError(f"{endpoint.url} sent an incomplete stream")
    return (first_at - started) * 1000, (finished - started) * 1000


async def _run(endpoints: dict[str, Endpoint], rounds: int, warmup: int) -> dict[str, Any]:
    names = list(endpoints)
    samples: dict[str, dict[str, list[float]]] = {n: {"ttfb": [], "total": []} for n in names}
    errors: dict[str, int] = dict.fromkeys(names, 0)
    timeout = aiohttp.ClientTimeout(total=60)
    sessions = {
        name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), timeout=timeout)
        for name in names
    }
    try:
        for index in range(warmup + rounds):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                try:
                    ttfb, total = await _one(sessions[name], endpoints[name])
                except (TimeoutError, aiohttp.ClientError, RuntimeError):
                    errors[name] += 1
                    continue
                if index >= warmup:
                    samples[name]["ttfb"].append(ttfb)
                    samples[name]["total"].append(total)
    finally:
        for session in sessions.values():
            await session.close()
    return {
        name: {
            "requests": len(samples[name]["total"]),
            "errors": errors[name],
            "ttfb": summarize_ms(samples[name]["ttfb"]),
            "latency": summarize_ms(samples[name]["total"]),
        }
        for name in names
    }


def run(endpoints: dict[str, Endpoint], *, rounds: int, warmup: int = 10) -> dict[str, Any]:
    return uvloop.run(_run(endpoints, rounds, warmup))


def added(results: dict[str, Any], baseline: str = "direct", key: str = "latency") -> dict:
    """Each target's percentiles minus the baseline's, in ms."""
    base = results.get(baseline, {}).get(key, {})
    out: dict[str, dict[str, float | None]] = {}
    for name, result in results.items():
        if name == baseline or not result.get("requests") or not base:
            continue
        out[name] = {
            q: (result[key][q] - base[q])
            if result[key][q] is not None and base[q] is not None
            else None
            for q in ("p50_ms", "p90_ms", "p99_ms")
        }
    return out
