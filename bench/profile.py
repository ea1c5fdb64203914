"""Profile the sidecar (or the bare forwarder) under wrk load with py-spy; print the hot frames.

    .venv/bin/python -m bench.profile --workload openai_json --concurrency 16 --seconds 10
    .venv/bin/python -m bench.profile --workload mediated_r3 --target sidecar
    .venv/bin/python -m bench.profile --workload destructive_r1  # one journaled round
    .venv/bin/python -m bench.profile --workload destructive_r1_distinct --count

``--count`` samples nothing: it prints, per request, the CPU, each thread's context switches
(a voluntary one is a wait the thread was woken from) and, where ``perf`` may trace system calls,
the ``fdatasync``, ``pwrite64`` and ``futex`` calls: how many syncs and wake-ups a request costs.

Needs ``py-spy`` on PATH, but not for ``--count`` (``pip install py-spy``; it is not a project
dependency). Writes the collapsed stacks next to the summary so they can be fed to a flame-graph
tool.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

from bench import loadgen
from bench.ab import WORKLOADS
from bench.run import Bench, Settings

COUNTED_CALLS = ("fdatasync", "pwrite64", "futex")


def _threads(pid: int) -> dict[str, tuple[float, int, int]]:
    """Each thread of ``pid`` (``name/tid``): CPU seconds, voluntary and involuntary switches."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines())
        fields = (task / "stat").read_text().rpartition(")")[2].split()
        cpu = (int(fields[11]) + int(fields[12])) / ticks
        switches = int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"])
        found[f"{status['Name'].strip()}/{task.name}"] = (cpu, *switches)
    return found


def _perf(pid: int, seconds: int) -> subprocess.Popen[str] | None:
    """``perf stat`` counting the system calls of COUNTED_CALLS (None without perf)."""
    perf = shutil.which("perf")
    if not perf:
        return None
    events = ",".join(f"syscalls:sys_enter_{call}" for call in COUNTED_CALLS)
    argv = [perf, "stat", "-x", ",", "-e", events, "-p", str(pid), "--", "sleep", str(seconds)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def counted(before: dict, after: dict, perf_output: str, requests: int) -> str:
    """Per request: each thread's CPU ms and switches, and the counted system calls."""
    lines = [f"{requests} requests; per request:", "thread  CPU ms  voluntary  involuntary"]
    for thread, (cpu, voluntary, involuntary) in sorted(after.items()):
        cpu0, voluntary0, involuntary0 = before.get(thread, (0.0, 0, 0))
        lines.append(
            f"{thread}  {1000 * (cpu - cpu0) / requests:.3f}"
            f"  {(voluntary - voluntary0) / requests:.2f}"
            f"  {(involuntary - involuntary0) / requests:.2f}"
        )
    for row in perf_output.splitlines():
        value, _, rest = row.partition(",")
        event = next((c for c in COUNTED_CALLS if f"sys_enter_{c}," in rest + ","), None)
        if event and value.isdigit():
            lines.append(f"{event}: {int(value) / requests:.2f}")
    return "\n".join(lines)


def summarize(collapsed: Path, top: int) -> str:
    """Self and inclusive sample shares per function from py-spy's collapsed-stack output."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if not total:
        return "no samples"
    lines = [f"{total} samples", "", "self %  function"]
    lines += [f"{100 * n / total:6.1f}  {frame}" for frame, n in own.most_common(top)]
    lines += ["", "incl %  function"]
    lines += [f"{100 * n / total:6.1f}  {frame}" for frame, n in inclusive.most_common(top)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=WORKLOADS, default="openai_json")
    parser.add_argument("--target", choices=("sidecar", "bare"), default="sidecar")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--count", action="store_true", help="syncs and switches per request")
    parser.add_argument(
        "--output", type=Path, default=Path(tempfile.gettempdir()) / "clawpod-profile"
    )
    args = parser.parse_args()
    py_spy = shutil.which("py-spy")
    if not (py_spy or args.count):
        print("py-spy is not on PATH (pip install py-spy)", file=sys.stderr)
        return 2
    settings = Settings(
        False, args.seconds, 1, (args.concurrency,), (), (0, 1, 3), 0, (1, 1, 1), False
    )
    bench = Bench(settings, Path(tempfile.mkdtemp(prefix="clawpod-profile-")))
    args.output.mkdir(parents=True, exist_ok=True)
    collapsed = args.output / f"{args.target}-{args.workload}-c{args.concurrency}.txt"
    try:
        bench.start()
        target = bench.targets[args.target]
        assert target.process is not None
        headers = None
        workload, agent = WORKLOADS[args.workload]  # the body it sends, as which agent
        if workload.startswith("mediated"):
            headers = {"Authorization": f"Bearer {bench.tokens[agent]}"}
        url, route_headers = bench._route(target, workload)
        body = bench.bodies[workload]
        loadgen.run_wrk(
            url,
            concurrency=args.concurrency,
            duration_s=1,
            headers=headers or route_headers,
            body_file=body,
        )
        if args.count:
            return _count(target.process.pid, args, url, headers or route_headers, body)
        assert py_spy is not None
        recorder = subprocess.Popen(
            [
                py_spy,
                "record",
                "--pid",
                str(target.process.pid),
                "--duration",
                str(args.seconds),
                "--format",
                "raw",
                "--rate",
                "250",
                "--output",
                str(collapsed),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        result: dict = {}
        load = threading.Thread(
            target=lambda: result.update(
                loadgen.run_wrk(
                    url,
                    concurrency=args.concurrency,
                    duration_s=args.seconds,
                    headers=headers or route_headers,
                    body_file=body,
                )
            )
        )
        load.start()
        load.join()
        recorder.wait(timeout=60)
    finally:
        bench.stop_all()
    print(
        f"{args.target} {args.workload} c={args.concurrency}: "
        f"{result.get('throughput_rps', 0):.0f} rps,"
        f" p50 {result.get('latency', {}).get('p50_ms')} ms"
    )
    print(summarize(collapsed, args.top))
    print(f"collapsed stacks: {collapsed}")
    return 0


def _count(pid: int, args: argparse.Namespace, url: str, headers: dict, body: Path) -> int:
    before = _threads(pid)
    perf = _perf(pid, args.seconds)
    result = loadgen.run_wrk(
        url, concurrency=args.concurrency, duration_s=args.seconds, headers=headers, body_file=body
    )
    after = _threads(pid)
    perf_output = perf.communicate(timeout=60)[1] if perf is not None else ""
    requests = max(1, result["requests"])
    print(f"{args.workload} c={args.concurrency}: {result['throughput_rps']:.0f} rps")
    print(counted(before, after, perf_output, requests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
