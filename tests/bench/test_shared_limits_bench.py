"""bench.shared_limits, a tiny run against a real redis-server: the report's structure and that
every check really went through the shared store (its counters moved), never timings."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.shared_limits import base_module, measure
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis


async def test_a_tiny_run_reports_every_figure(tmp_path: Path, redis_server: RedisServer) -> None:
    report = await measure(redis_server.url, tmp_path, rounds=20, warm=5)
    for name in ("local_admit", "shared_admit", "shared_settle", "local_rate", "shared_rate"):
        assert set(report[name]) == {"p50_ms", "p90_ms", "p99_ms", "mean_ms"}
    assert report["rounds"] == 20 and report["target_p50_ms"] == 0.3
    client = redis_server.client()
    try:
        keys = [k.decode() for k in client.scan_iter(match="{clawpod}:*")]
    finally:
        client.close()
    assert any(":budget:group/team:" in k for k in keys)
    assert any(":rate:pod/bench/agent/agent/" in k for k in keys)


async def test_a_base_commit_is_measured_beside_this_tree(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    base = base_module("HEAD")
    report = await measure(redis_server.url, tmp_path, rounds=20, warm=5, base=base)
    assert base.__name__ != "clawpod.sidecar.state.shared_counters"
    for name in ("base_admit", "base_rate", "base_settle"):
        assert set(report[name]) == {"p50_ms", "p90_ms", "p99_ms", "mean_ms"}
    for ratio in ("admit_p50_this_over_base", "rate_p50_this_over_base"):
        assert report[ratio] > 0
