"""Shared limits (SPEC §24): a real redis-server per test, and the counters of the pod on it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clawpod.sidecar.state.counters import LocalCounters
from clawpod.sidecar.state.shared_counters import SharedCounters, connect


@pytest.fixture
async def shared_counters(tmp_path: Path) -> AsyncIterator[list[SharedCounters]]:
    """Counters made by ``make_shared`` (closed at the end)."""
    made: list[SharedCounters] = []
    yield made
    for counters in made:
        await counters.close()


def make_shared(
    made: list[SharedCounters],
    url: str,
    state_dir: Path,
    subjects: list[str],
    on_unreachable: str = "fail-closed",
    today: str = "2026-12-07",
) -> SharedCounters:
    local = LocalCounters(state_dir, subjects, subjects, lambda: today)
    counters = SharedCounters(
        connect(url),
        pod="desk",
        on_unreachable=on_unreachable,  # type: ignore[arg-type]
        local=local,
        today=lambda: today,
    )
    made.append(counters)
    return counters


async def warm(counters: SharedCounters, connections: int) -> None:
    """Open the connections a burst will use before it: on a loaded machine, opening many at
    once can outlast a check's bound, and the tests count exact admissions."""
    for _ in range(20):
        try:
            await asyncio.gather(*(counters._redis.ping() for _ in range(connections)))
            return
        except Exception:
            await asyncio.sleep(0.1)
    raise AssertionError("the server never answered the warm-up")
