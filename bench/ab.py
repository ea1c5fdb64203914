"""A/B the sidecar of this tree against the sidecar of another commit, in one run.

    .venv/bin/python -m bench.ab HEAD~1
    .venv/bin/python -m bench.ab main --workload anthropic_json --reps 8 --concurrency 64

Both sidecars serve the same build against the same stubs; wrk cells alternate between them
(the order flips every round) so both see the same machine noise. Prints each side's median
CPU per request (from /proc) and throughput, and the ratio. A change of a few per cent is
visible this way where two separate bench runs differ by ±30 %.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.processes import free_port
from bench.run import PROVIDER_KEYS, REPO, Bench, Settings, Target, sidecar_command
from clawpod.sidecar.audit.chain import AUDIT_KEY_ENV

WORKLOADS = ("openai_json", "anthropic_json", "openai_sse", "mediated_r1", "mediated_r3")


def start_sidecar(bench: Bench, label: str, tree: Path, agent: str) -> Target:
    token = bench.tokens[agent]
    # The package is `clawpod` (the tree's root): a directory holding a `clawpod` link to the
    # tree, first on the path, wins over the editable install of this tree.
    packages = bench.workdir / f"packages-{label}"
    packages.mkdir()
    (packages / "clawpod").symlink_to(tree.resolve(), target_is_directory=True)
    server = bench._start(
        f"sidecar-{label}",
        sidecar_command(bench.workdir / "build", bench.workdir / f"state-{label}", free_port()),
        # The sidecar refuses to start without an audit key.
        env={**PROVIDER_KEYS, AUDIT_KEY_ENV: secrets.token_hex(32), "PYTHONPATH": str(packages)},
        cwd=tree,
    )
    headers = {"Authorization": f"Bearer {token}"}
    return Target(
        label, server.url(), headers, {**headers, "anthropic-version": "2023-06-01"}, server
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="git commit (or ref) to compare this tree against")
    parser.add_argument("--workload", choices=WORKLOADS, default="openai_json")
    parser.add_argument("--reps", type=int, default=6, help="cells per side")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=int, default=3, help="seconds per cell")
    args = parser.parse_args(argv)

    settings = Settings.from_args(
        argparse.Namespace(quick=False, duration=args.duration, litellm=False)
    )
    with tempfile.TemporaryDirectory(prefix="clawpod-ab-") as scratch:
        base_tree = Path(scratch) / "base"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(base_tree), args.base],
            check=True,
            capture_output=True,
        )
        bench = Bench(settings, Path(scratch) / "work")
        try:
            bench.start()
            # Mediated workloads need the agent that has a tool; the rest pass through.
            agent = "bench-mediated" if args.workload.startswith("mediated") else "bench-native"
            targets = {
                "base": start_sidecar(bench, "base", base_tree, agent),
                "this": start_sidecar(bench, "this", REPO, agent),
            }
            cells: dict[str, list[dict]] = {"base": [], "this": []}
            for rep in range(args.reps):
                order = ("base", "this") if rep % 2 == 0 else ("this", "base")
                for label in order:
                    cell = bench.measure(targets[label], args.workload, args.concurrency)
                    cells[label].append(cell)
        finally:
            bench.stop_all()
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base_tree)],
                check=False,
                capture_output=True,
            )
    cpu = {
        name: statistics.median(c["proxy_cpu_ms_per_request"] for c in cells[name])
        for name in cells
    }
    rps = {name: statistics.median(c["throughput_rps"] for c in cells[name]) for name in cells}
    print(f"{args.workload} c={args.concurrency}, {args.reps} cells each, medians:")
    for label in ("base", "this"):
        print(f"  {label:4}  {cpu[label]:.3f} ms CPU/request  {rps[label]:.0f} requests/s")
    cpu_ratio, rps_ratio = cpu["this"] / cpu["base"], rps["this"] / rps["base"]
    print(f"  this/base CPU {cpu_ratio:.3f}, throughput {rps_ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
