"""Streaming load client: time to first body byte and full-stream latency, over several processes.

wrk cannot timestamp the first byte of a response, so streams are measured here. Each process
runs its own uvloop event loop with ``concurrency / processes`` clients on pooled keep-alive
connections; each client sends requests back to back until the shared request count is spent.
Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import time
from typing import Any

import aiohttp
import uvloop

STREAM_ENDINGS = (b"[DONE]\n\n", b'message_stop"}\n\n')


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(q / 100 * len(ordered))  # nearest-rank percentile
    return ordered[min(len(ordered), max(1, rank)) - 1]


def summarize_ms(values: list[float]) -> dict[str, float | None]:
    return {f"p{q}_ms": percentile(values, q) for q in (50, 90, 99)}


async def read_timed(response: aiohttp.ClientResponse) -> tuple[float, float, bytes]:
    """Read the whole body: when its first bytes came, when it ended (perf_counter), and its
    last bytes (to check a stream's end marker)."""
    first = await response.content.readany()
    first_at = time.perf_counter()
    tail = first[-32:]
    async for chunk in response.content.iter_any():
        tail = (tail + chunk)[-32:]
    return first_at, time.perf_counter(), tail


async def _client(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    budget: list[int],
    deadline: float,
    out: dict[str, list],
) -> None:
    while budget[0] > 0 and time.monotonic() < deadline:
        budget[0] -= 1
        started = time.perf_counter()
        try:
            async with session.post(url, data=body, headers=headers) as response:
                first_at, finished, tail = await read_timed(response)
            complete = response.status == 200 and tail.endswith(STREAM_ENDINGS)
        except (TimeoutError, aiohttp.ClientError) as exc:
            out["errors"].append(type(exc).__name__)
            continue
        if not complete:
            out["errors"].append(f"status {response.status} or incomplete stream")
            continue
        out["ttfb"].append((first_at - started) * 1000)
        out["total"].append((finished - started) * 1000)


async def _run_process(args: dict[str, Any]) -> dict[str, list]:
    out: dict[str, list] = {"ttfb": [], "total": [], "errors": []}
    budget = [args["requests"]]
    deadline = time.monotonic() + args["max_seconds"]
    timeout = aiohttp.ClientTimeout(total=args["timeout_s"])
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        clients = [
            _client(session, args["url"], args["body"], args["headers"], budget, deadline, out)
            for _ in range(args["concurrency"])
        ]
        await asyncio.gather(*clients)
    return out


def _process_main(args: dict[str, Any], queue: multiprocessing.Queue) -> None:
    queue.put(uvloop.run(_run_process(args)))


def run(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    concurrency: int,
    requests: int,
    processes: int = 1,
    timeout_s: float = 120.0,
    max_seconds: float = 3600.0,
) -> dict[str, Any]:
    """Send ``requests`` streams (fewer if ``max_seconds`` runs out first) and summarise them."""
    processes = max(1, min(processes, concurrency))
    queue: multiprocessing.Queue = multiprocessing.Queue()
    workers = []
    for index in range(processes):
        share = {
            "url": url,
            "body": body,
            "headers": headers,
            "concurrency": concurrency // processes + (index < concurrency % processes),
            "requests": requests // processes + (index < requests % processes),
            "timeout_s": timeout_s,
            "max_seconds": max_seconds,
        }
        workers.append(multiprocessing.Process(target=_process_main, args=(share, queue)))
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    results = [queue.get() for _ in workers]
    elapsed = time.perf_counter() - started
    for worker in workers:
        worker.join()
    ttfb = [v for r in results for v in r["ttfb"]]
    total = [v for r in results for v in r["total"]]
    errors = [v for r in results for v in r["errors"]]
    return {
        "concurrency": concurrency,
        "requests": len(total),
        "errors": len(errors),
        "error_samples": sorted(set(errors))[:3],
        "elapsed_s": elapsed,
        "throughput_rps": len(total) / elapsed if elapsed else 0.0,
        "ttfb": summarize_ms(ttfb),
        "latency": summarize_ms(total),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--body-file", required=True)
    parser.add_argument("--header", action="append", default=[], help="'Name: value'")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    headers = dict(h.split(": ", 1) for h in args.header)
    with open(args.body_file, "rb") as handle:
        body = handle.read()
    result = run(
        args.url,
        body,
        headers,
        concurrency=args.concurrency,
        requests=args.requests,
        processes=args.processes,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
