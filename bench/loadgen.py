"""Drive load with wrk (request/response latency and throughput) and read its JSON summary.

wrk is a C event loop: at the rates a Python server reaches here it needs a fraction of one
core, so it does not cap what it measures, unlike a Python client sharing the 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

LUA_SCRIPT = Path(__file__).parent / "wrk" / "post.lua"
MARKER = "BENCH_JSON "


def wrk_path() -> str:
    path = shutil.which("wrk")
    if not path:
        raise RuntimeError("wrk is not installed: run bench/run.sh, which installs it")
    return path


def wrk_version() -> str:
    result = subprocess.run([wrk_path(), "--version"], capture_output=True, text=True, check=False)
    return (result.stdout or result.stderr).split("Copyright")[0].strip()


def run_wrk(
    url: str,
    *,
    concurrency: int,
    duration_s: float,
    headers: dict[str, str],
    body_file: Path | None,
    timeout_s: int = 10,
) -> dict[str, Any]:
    """Run one wrk measurement; return throughput, latency percentiles (ms) and errors."""
    argv = [
        wrk_path(),
        "-t1",
        f"-c{concurrency}",
        f"-d{max(1, round(duration_s))}s",
        f"--timeout={timeout_s}s",
        "-s",
        str(LUA_SCRIPT),
    ]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    argv.append(url)
    env = {**os.environ, "BENCH_BODY_FILE": str(body_file) if body_file else ""}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in result.stdout.splitlines() if line.startswith(MARKER)]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed ({result.returncode}): {result.stderr or result.stdout}")
    raw = json.loads(lines[-1][len(MARKER) :])
    errors = sum(value for key, value in raw.items() if key.startswith("errors_"))
    seconds = raw["duration_us"] / 1e6
    answered = raw["requests"] - raw["errors_status"]  # wrk counts non-2xx/3xx as requests too
    return {
        "concurrency": concurrency,
        "requests": raw["requests"],
        "errors": errors,
        "error_detail": {k[7:]: v for k, v in raw.items() if k.startswith("errors_") and v},
        "duration_s": seconds,
        "throughput_rps": answered / seconds if seconds else 0.0,
        "latency": {f"p{q}_ms": raw[f"latency_p{q}_us"] / 1000 for q in (50, 90, 99)},
        "latency_mean_ms": raw["latency_mean_us"] / 1000,
        "bytes_per_request": raw["bytes"] / raw["requests"] if raw["requests"] else 0,
    }
