"""What a shared limit check costs (SPEC §20: ≤ 0.3 ms p50 at c=1): a budget's admission of one
request against a real redis-server on 127.0.0.1 (one Lua script, one round trip) beside the
same admission in the sidecar's own counters, interleaved round by round so both see the same
noise; a tool rate's check; and a bare PING of the same client, the round trip's floor on the
machine. The settlement (the hold released and the spend counted, one more script) happens
after the answer went out, off the client's path: reported, not counted in the added latency.

    python -m bench.shared_limits [--rounds N] [--output FILE]

It starts its own redis-server (Debian's package: scripts/install-redis.sh) at a random port
and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from clawpod.sidecar.governance.budgets import TokenBudgets
from clawpod.sidecar.manifest import BudgetGroup, Governance, Rate
from clawpod.sidecar.state.counters import LocalCounters
from clawpod.sidecar.state.shared_counters import SharedCounters, connect
from tests.support.redis_server import RedisServer

GOVERNANCE = Governance(
    budgets={"agent": 10**12},
    usd_budgets={"agent": 10.0**6},
    budget_groups={"team": BudgetGroup(agents=["agent"], tokens_per_day=10**12)},
)
RATE = Rate(count=10**6, per="second")


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {
        "p50_ms": round(pick(0.5) * 1000, 4),
        "p90_ms": round(pick(0.9) * 1000, 4),
        "p99_ms": round(pick(0.99) * 1000, 4),
        "mean_ms": round(statistics.fmean(samples) * 1000, 4),
    }


async def _timed(work: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await work()
    return time.perf_counter() - start, result


async def measure(url: str, state: Path, rounds: int, warm: int = 200) -> dict[str, Any]:
    local = TokenBudgets(GOVERNANCE, ["agent"], state / "local")
    shared_counters = SharedCounters(
        connect(url), pod="bench", on_unreachable="fail-closed", local=LocalCounters(state)
    )
    await shared_counters.start()
    shared = TokenBudgets(GOVERNANCE, ["agent"], state / "shared", counters=shared_counters)
    names = ("local_admit", "shared_admit", "shared_settle", "local_rate", "shared_rate", "ping")
    samples: dict[str, list[float]] = {name: [] for name in names}
    ping = shared_counters._redis.ping  # the floor: one round trip of the same client
    local_rates = LocalCounters(state / "rates")
    for index in range(warm + rounds):
        for name, budgets in (("local", local), ("shared", shared))[:: 1 if index % 2 else -1]:
            took, hold = await _timed(lambda b=budgets: b.admit("agent", 100, 0.001))
            settle_start = time.perf_counter()
            await budgets.spend("agent", 90, 0.0009, hold)  # released with it, in one step
            settled = time.perf_counter() - settle_start
            if index >= warm:
                samples[f"{name}_admit"].append(took)
                if name == "shared":
                    samples["shared_settle"].append(settled)
        for name, counters in (("local", local_rates), ("shared", shared_counters)):
            took, _ = await _timed(lambda c=counters: c.take(("agent", "t", 0), RATE))
            if index >= warm:
                samples[f"{name}_rate"].append(took)
        took, _ = await _timed(ping)
        if index >= warm:
            samples["ping"].append(took)
    await shared_counters.close()
    report: dict[str, Any] = {name: _percentiles(values) for name, values in samples.items()}
    report["added_admit_p50_ms"] = round(
        report["shared_admit"]["p50_ms"] - report["local_admit"]["p50_ms"], 4
    )
    report["added_rate_p50_ms"] = round(
        report["shared_rate"]["p50_ms"] - report["local_rate"]["p50_ms"], 4
    )
    report["target_p50_ms"] = 0.3
    report["rounds"] = rounds
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        # Redis's default durability of an append-only file (docs/shared-limits.md).
        server = RedisServer(Path(directory) / "redis", appendfsync="everysec").start()
        try:
            report = asyncio.run(measure(server.url, Path(directory), args.rounds))
        finally:
            server.kill()
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
