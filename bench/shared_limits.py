"""What a shared limit check costs (SPEC §20: ≤ 0.3 ms p50 at c=1): a budget's admission of one
request against a real redis-server on 127.0.0.1 (one Lua script, one round trip) beside the
same admission in the sidecar's own counters, interleaved round by round so both see the same
noise; a tool rate's check; and a bare PING of the same client, the round trip's floor on the
machine. The settlement (the hold released and the spend counted, one more script) happens
after the answer went out, off the client's path: reported, not counted in the added latency.

    python -m bench.shared_limits [--rounds N] [--output FILE] [--base COMMIT]

It starts its own redis-server (Debian's package: scripts/install-redis.sh) at a random port
and stops it at the end. ``--base COMMIT`` measures that commit's ``shared_counters.py`` (with
the rest of this tree) in the same rounds, interleaved: the shared checks of both, and this
tree's over the base's, as ratios (two separate runs on a loaded machine differ by half).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from clawpod.sidecar.governance.budgets import TokenBudgets
from clawpod.sidecar.manifest import BudgetGroup, Governance, Rate
from clawpod.sidecar.state import shared_counters as this_tree
from clawpod.sidecar.state.counters import LocalCounters
from tests.support.redis_server import RedisServer

REPO = Path(__file__).resolve().parent.parent
MODULE_PATH = "sidecar/state/shared_counters.py"

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


def base_module(commit: str) -> ModuleType:
    """``shared_counters.py`` as it was at ``commit``, importing the rest of this tree."""
    source = subprocess.run(
        ["git", "show", f"{commit}:{MODULE_PATH}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    name = f"{this_tree.__package__}._base_shared_counters"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = this_tree.__package__
    sys.modules[name] = module
    exec(compile(source, f"{commit}:{MODULE_PATH}", "exec"), module.__dict__)
    return module


async def measure(
    url: str, state: Path, rounds: int, warm: int = 200, base: ModuleType | None = None
) -> dict[str, Any]:
    sides = {"shared": this_tree, **({"base": base} if base is not None else {})}
    local = TokenBudgets(GOVERNANCE, ["agent"], state / "local")
    counters = {
        side: module.SharedCounters(
            module.connect(url),
            pod="bench",
            on_unreachable="fail-closed",
            local=LocalCounters(state / f"{side}-local"),
        )
        for side, module in sides.items()
    }
    for side_counters in counters.values():
        await side_counters.start()
    budgets = {"local": local} | {
        side: TokenBudgets(GOVERNANCE, ["agent"], state / side, counters=c)
        for side, c in counters.items()
    }
    names = [f"{side}_{check}" for side in budgets for check in ("admit", "rate")]
    names += [f"{side}_settle" for side in counters] + ["ping"]
    samples: dict[str, list[float]] = {name: [] for name in names}
    # The floor: one round trip of this tree's client, on a connection of its own (a side whose
    # connection also carried the PINGs measured slower than the same code beside it).
    floor = this_tree.connect(url)
    ping = floor.ping
    rates = {"local": LocalCounters(state / "rates"), **counters}
    order, shuffle = list(budgets), random.Random(0).shuffle
    for index in range(warm + rounds):
        # A side measured right after another may pay for it (the local one writes its state):
        # a random order gives each side every neighbour alike.
        shuffle(order)
        for side in order:
            took, hold = await _timed(lambda b=budgets[side]: b.admit("agent", 100, 0.001))
            settle_start = time.perf_counter()
            await budgets[side].spend("agent", 90, 0.0009, hold)  # released with it, at once
            settled = time.perf_counter() - settle_start
            if index >= warm:
                samples[f"{side}_admit"].append(took)
                if side != "local":
                    samples[f"{side}_settle"].append(settled)
        for side in order:
            took, _ = await _timed(lambda c=rates[side]: c.take(("agent", "t", 0), RATE))
            if index >= warm:
                samples[f"{side}_rate"].append(took)
        took, _ = await _timed(ping)
        if index >= warm:
            samples["ping"].append(took)
    for side_counters in counters.values():
        await side_counters.close()
    await floor.aclose()
    report: dict[str, Any] = {name: _percentiles(values) for name, values in samples.items()}
    for check in ("admit", "rate"):
        p50 = {side: report[f"{side}_{check}"]["p50_ms"] for side in budgets}
        report[f"added_{check}_p50_ms"] = round(p50["shared"] - p50["local"], 4)
        if base is not None:
            report[f"base_added_{check}_p50_ms"] = round(p50["base"] - p50["local"], 4)
            report[f"{check}_p50_this_over_base"] = round(p50["shared"] / p50["base"], 3)
    if base is not None:
        report["settle_p50_this_over_base"] = round(
            report["shared_settle"]["p50_ms"] / report["base_settle"]["p50_ms"], 3
        )
    report["target_p50_ms"] = 0.3
    report["rounds"] = rounds
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--output", type=Path)
    parser.add_argument("--base", metavar="COMMIT", help="measure that commit's beside this")
    args = parser.parse_args(argv)
    base = base_module(args.base) if args.base else None
    with tempfile.TemporaryDirectory() as directory:
        # Redis's default durability of an append-only file (docs/shared-limits.md).
        server = RedisServer(Path(directory) / "redis", appendfsync="everysec").start()
        try:
            report = asyncio.run(measure(server.url, Path(directory), args.rounds, base=base))
            if base is not None:
                report["base"] = args.base
        finally:
            server.kill()
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
