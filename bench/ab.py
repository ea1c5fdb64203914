"""A/B the sidecar of this tree against the sidecar of another commit, in one run.

    .venv/bin/python -m bench.ab HEAD~1
    .venv/bin/python -m bench.ab main --workload anthropic_json --reps 8 --concurrency 64
    .venv/bin/python -m bench.ab 75130f8 --whole   # the mediated targets of SPEC §19
    .venv/bin/python -m bench.ab main --workload anthropic_json anthropic_to_chat_json
    .venv/bin/python -m bench.ab main --workload openai_sse chat_to_messages_sse --paced 1

Both sidecars serve the same build against the same stubs; wrk cells alternate between them
(the order flips every round) so both see the same machine noise. Prints each side's median
CPU per request (from /proc) and throughput, and the ratio. A change of a few per cent is
visible this way where two separate bench runs differ by ±30 %.

``--whole`` measures the request kinds SPEC §19 sets targets for, each whole (the sidecar's CPU
over the requests it answered, not a slope over round counts): pass-through, a mediated request
with zero rounds, with one read-only round and with one destructive (journaled) round, and
prints them as one table with the base commit's column beside this tree's, and below it the
bare aiohttp forwarder's pass-through cells of the same run (SPEC §19 sets pass-through's c=16
throughput against it). ``--floor`` measures those forwarder cells beside any run that has
``openai_json``.

``--paced MS`` has the upstream pause after each chunk of a stream, as a model streaming at its
own pace does: each side then reads each event on its own. Without it the upstream sends a
stream at once, and how many pieces a sidecar reads it in depends on its own speed (a slower
one reads fewer, larger pieces, and spends less in the kernel), which moves a stream's cell by
more than a translation costs.

``--own-builds`` gives each side a build its own tree writes (its ``bench/run.py``
``write_bench_build``), for a base whose sidecar cannot read this tree's build, such as the
commit an issue's targets were measured on. Workloads whose agent the base's build lacks are
measured for this side only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from bench.processes import free_port
from bench.run import (
    OTHER_DIRECTIONS,
    PROVIDER_KEYS,
    REPO,
    TRANSLATED,
    TRANSLATED_SSE,
    Bench,
    Settings,
    Target,
    sidecar_command,
)
from clawpod.sidecar.audit.log import AUDIT_KEY_ENV

# Workload -> (request body, agent): the mediated agents have one lookup tool, read-only or
# with side effects (journaled, with an Idempotency-Key).
WORKLOADS = {
    "openai_json": ("openai_json", "bench-native"),
    "anthropic_json": ("anthropic_json", "bench-native"),
    "openai_sse": ("openai_sse", "bench-native"),
    "anthropic_sse": ("anthropic_sse", "bench-native"),
    "responses_sse": ("responses_sse", "bench-native"),
    "mediated_r0": ("mediated_r0", "bench-mediated"),
    "mediated_r1": ("mediated_r1", "bench-mediated"),
    "mediated_r3": ("mediated_r3", "bench-mediated"),
    "destructive_r1": ("mediated_r1", "bench-mediated-write"),
    # Every request its own (the others send one body c times at once: retries of one request,
    # which the sidecar runs one at a time, SPEC §8.2).
    "mediated_r1_distinct": ("mediated_r1_distinct", "bench-mediated"),
    "destructive_r1_distinct": ("mediated_r1_distinct", "bench-mediated-write"),
    # A Messages caller of the Chat-only provider (contract §18), whole and streamed: compared
    # with anthropic_json and anthropic_sse (SPEC §19: translation over same-protocol
    # pass-through).
    TRANSLATED: (TRANSLATED, "bench-native"),
    TRANSLATED_SSE: (TRANSLATED_SSE, "bench-native"),
    **{name: (name, "bench-native") for name in OTHER_DIRECTIONS},
}
WHOLE = ("openai_json", "mediated_r0", "mediated_r1", "destructive_r1")
# SPEC §19's bounds, ms of CPU per request.
TARGETS = {"mediated_r1": 0.45, "destructive_r1": 0.6}


def _pass_through_of(workload: str) -> str:
    """The same caller's pass-through: its stream for a stream; a whole answer over
    anthropic_json or openai_json (the bench has no whole Responses pass-through)."""
    caller = workload.split("_to_")[0]
    if workload.endswith("sse"):
        return "openai_sse" if caller == "chat" else f"{caller}_sse"
    return "anthropic_json" if caller == "anthropic" else "openai_json"


# Workloads whose figure is over another's (its same-protocol pass-through), with the bound
# over it where SPEC §19 sets one.
OVER = {
    "mediated_r0": ("openai_json", 0.15),
    TRANSLATED: ("anthropic_json", 0.05),
    TRANSLATED_SSE: ("anthropic_sse", None),
    **{name: (_pass_through_of(name), None) for name in OTHER_DIRECTIONS},
}


def build_compiled_modules(tree: Path, scratch: Path) -> None:
    """The tree's compiled modules (``setup.py``), built as its wheel builds them and put in
    place beside their sources: a worktree of a commit holds only the sources. Only commits of
    wave 3 have one (stream translation's run reader, since removed): they need a C compiler."""
    if not (tree / "setup.py").exists():
        return  # a pure-Python commit
    wheel_dir = scratch / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheel_dir), str(tree)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheel_dir.glob("clawpod-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(".so"):  # the package is the tree's root
                (tree / name.removeprefix("clawpod/")).write_bytes(archive.read(name))


def packages_for(bench: Bench, label: str, tree: Path) -> Path:
    """A directory holding a `clawpod` link to the tree: first on the path, it wins over the
    editable install of this tree (the package is the tree's root)."""
    packages = bench.workdir / f"packages-{label}"
    packages.mkdir()
    (packages / "clawpod").symlink_to(tree.resolve(), target_is_directory=True)
    return packages


def write_own_build(bench: Bench, label: str, tree: Path) -> tuple[Path, dict[str, str]]:
    """The bench build as the tree's own writer makes it, and its agents' tokens."""
    build = bench.workdir / f"build-{label}"
    writer = (
        "import json, sys; from pathlib import Path; from bench.run import write_bench_build; "
        "print(json.dumps(write_bench_build(Path(sys.argv[1]), sys.argv[2], sys.argv[3])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", writer, str(build), bench.upstream.url(), bench.tools.url()],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(bench.workdir / f"packages-{label}")},
        check=True,
        capture_output=True,
        text=True,
    )
    return build, json.loads(done.stdout.strip().splitlines()[-1])


def start_sidecar(bench: Bench, label: str, tree: Path, own_build: bool) -> Target:
    packages = packages_for(bench, label, tree)
    shared = (bench.workdir / "build", bench.tokens)
    build, tokens = write_own_build(bench, label, tree) if own_build else shared
    server = bench._start(
        f"sidecar-{label}",
        sidecar_command(build, bench.workdir / f"state-{label}", free_port()),
        # The sidecar refuses to start without an audit key.
        env={**PROVIDER_KEYS, AUDIT_KEY_ENV: secrets.token_hex(32), "PYTHONPATH": str(packages)},
        cwd=tree,
    )
    return Target(label, server.url(), {}, {"anthropic-version": "2023-06-01"}, server, tokens)


def headers_for(target: Target, workload: str) -> dict[str, str] | None:
    """The workload's headers for this side, or None if its build has no such agent."""
    body, agent = WORKLOADS[workload]
    if agent not in target.tokens:
        return None
    route = target.anthropic_headers if body.startswith("anthropic") else target.openai_headers
    return {**(route or {}), "Authorization": f"Bearer {target.tokens[agent]}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="git commit (or ref) to compare this tree against")
    parser.add_argument("--workload", choices=WORKLOADS, nargs="+", default=["openai_json"])
    parser.add_argument(
        "--whole", action="store_true", help="the SPEC §19 table: " + ", ".join(WHOLE)
    )
    parser.add_argument(
        "--floor", action="store_true", help="the bare forwarder's openai_json cells too"
    )
    parser.add_argument(
        "--own-builds",
        action="store_true",
        help="each side on a build its own tree writes (for bases that cannot read this one's)",
    )
    parser.add_argument("--reps", type=int, default=6, help="cells per side")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=int, default=3, help="seconds per cell")
    parser.add_argument(
        "--paced",
        type=float,
        default=0.0,
        metavar="MS",
        help="the upstream pauses MS ms after each stream chunk: both sides read one event a piece",
    )
    args = parser.parse_args(argv)
    workloads = WHOLE if args.whole else tuple(dict.fromkeys(args.workload))

    settings = Settings.from_args(
        argparse.Namespace(quick=False, duration=args.duration, litellm=False)
    )
    settings = dataclasses.replace(settings, stream_pause_ms=args.paced)
    cells: dict[str, dict[str, list[dict]]] = {w: {"base": [], "this": []} for w in workloads}
    floor: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="clawpod-ab-") as scratch:
        base_tree = Path(scratch) / "base"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(base_tree), args.base],
            check=True,
            capture_output=True,
        )
        build_compiled_modules(base_tree, Path(scratch))
        bench = Bench(settings, Path(scratch) / "work")
        try:
            bench.start()
            targets = {
                "base": start_sidecar(bench, "base", base_tree, args.own_builds),
                "this": start_sidecar(bench, "this", REPO, args.own_builds),
            }
            for rep in range(args.reps):
                order = ("base", "this") if rep % 2 == 0 else ("this", "base")
                for workload in workloads:
                    for label in order:
                        target = targets[label]
                        headers = headers_for(target, workload)
                        if headers is None:
                            continue
                        body = WORKLOADS[workload][0]
                        cell = bench.measure(target, body, args.concurrency, headers)
                        cells[workload][label].append(cell)
                if (args.whole or args.floor) and "openai_json" in workloads:
                    # the floor SPEC §19 sets pass-through's throughput against
                    bare = bench.targets["bare"]
                    body = WORKLOADS["openai_json"][0]
                    floor.append(bench.measure(bare, body, args.concurrency, bare.openai_headers))
        finally:
            bench.stop_all()
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base_tree)],
                check=False,
                capture_output=True,
            )
    print(render(cells, args))
    if floor:
        print(render_floor(cells["openai_json"], floor))
    return 0


def render(cells: dict[str, dict[str, list[dict]]], args: argparse.Namespace) -> str:
    """One row per workload: each side's median CPU per request and throughput, the ratios,
    and the SPEC §19 bound where there is one."""
    cpu = {
        w: {side: _median(c, "proxy_cpu_ms_per_request") for side, c in sides.items()}
        for w, sides in cells.items()
    }
    rps = {
        w: {side: _median(c, "throughput_rps") for side, c in sides.items()}
        for w, sides in cells.items()
    }
    lines = [
        f"c={args.concurrency}, {args.reps} alternating {args.duration} s cells per side, medians;"
        f" base = {args.base}",
        "",
        "| workload | base CPU ms/req | this CPU ms/req | CPU this/base | throughput this/base "
        "| target (this) |",
        "|---|---|---|---|---|---|",
    ]
    for workload in cells:
        base, this = cpu[workload]["base"], cpu[workload]["this"]
        lines.append(
            f"| {workload} | {base:.3f} | {this:.3f} | {this / base:.3f} "
            f"| {rps[workload]['this'] / rps[workload]['base']:.3f} | {_target(cpu, workload)} |"
        )
    return "\n".join(lines)


def render_floor(passthrough: dict[str, list[dict]], bare: list[dict]) -> str:
    """The bare aiohttp forwarder's pass-through cells beside each side's (SPEC §19: c=16
    throughput at least 0.9 of the forwarder's)."""
    cpu = _median(bare, "proxy_cpu_ms_per_request")
    bare_rps = _median(bare, "throughput_rps")
    ratio = _median(passthrough["this"], "throughput_rps") / bare_rps
    base_ratio = _median(passthrough["base"], "throughput_rps") / bare_rps
    verdict = ">=" if ratio >= 0.9 else "<"
    return (
        f"\nbare aiohttp forwarder, openai_json: {cpu:.3f} CPU ms/req; "
        f"pass-through throughput this/bare {ratio:.3f} {verdict} 0.9 (base/bare {base_ratio:.3f})"
    )


def _target(cpu: dict[str, dict[str, float]], workload: str) -> str:
    """This tree's figure against its SPEC §19 bound, over its baseline where the bound is
    (with the base tree's difference beside it, to compare within the run)."""
    if workload in OVER:
        baseline, bound = OVER[workload]
        if baseline not in cpu:
            return ""
        this = cpu[workload]["this"] - cpu[baseline]["this"]
        base = cpu[workload]["base"] - cpu[baseline]["base"]
        verdict = f"{this:.3f} over {baseline} (base {base:.3f})"
    else:
        bound = TARGETS.get(workload)
        if bound is None:
            return ""
        this = cpu[workload]["this"]
        verdict = f"{this:.3f}"
    if bound is None:
        return verdict
    return f"{verdict} {'<=' if this <= bound else '>'} {bound}"


def _median(cells: list[dict], key: str) -> float:
    """The cells' median, or NaN where a side measured none (its build lacks the agent)."""
    return statistics.median(c[key] for c in cells) if cells else math.nan


if __name__ == "__main__":
    sys.exit(main())
