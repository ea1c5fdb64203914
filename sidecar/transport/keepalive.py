"""Comment keep-alives on a server-sent-events response while its answer is being worked out,
so proxies and clients with idle timeouts do not cut the exchange. One setting serves every
stream the sidecar answers (mediated LLM routes and MCP): ``CLAW_SSE_KEEPALIVE_MS``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

KEEPALIVE = b": keep-alive\n\n"
KEEPALIVE_ENV = "CLAW_SSE_KEEPALIVE_MS"
DEFAULT_KEEPALIVE_S = 5.0

T = TypeVar("T")


def keepalive_interval(env: Mapping[str, str]) -> float:
    """Seconds between keep-alives: ``CLAW_SSE_KEEPALIVE_MS`` when set and positive."""
    configured = env.get(KEEPALIVE_ENV)
    try:
        milliseconds = int(configured) if configured else 0
    except ValueError:
        milliseconds = 0
    return milliseconds / 1000 if milliseconds > 0 else DEFAULT_KEEPALIVE_S


async def with_keepalives(
    work: Awaitable[T], send: Callable[[bytes], Awaitable[object]], interval_s: float
) -> T:
    """Await ``work``; every ``interval_s`` without its result, ``send`` a keep-alive."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=interval_s)
        if done:
            return task.result()
        await send(KEEPALIVE)
