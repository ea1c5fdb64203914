"""Run ``clawc import openapi`` in-process or as a measured subprocess, and compile the result."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from clawpod.cli.clawc import main as clawc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openapi"


@dataclass
class Run:
    code: int
    out: str
    err: str


def run_import(*argv: str | Path) -> Run:
    out, err = io.StringIO(), io.StringIO()
    code = clawc(["import", "openapi", *map(str, argv)], out, err)
    return Run(code, out.getvalue(), err.getvalue())


@dataclass
class Measured:
    code: int
    err: str
    max_rss_mib: float


# A small parent that runs clawc and reports the kernel's count of its child's peak RSS (the
# test process's own children may be reaped by another library's SIGCHLD handling).
_MEASURE = """\
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
sys.stderr.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def run_import_measured(*argv: str | Path) -> Measured:
    """``clawc import openapi`` in a fresh process; its peak RSS as the kernel counted it."""
    command = [sys.executable, "-m", "clawpod.cli.clawc", "import", "openapi", *map(str, argv)]
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command], capture_output=True, text=True, check=True
    )
    code, max_rss_kib = map(int, done.stdout.split())
    return Measured(code, done.stderr, max_rss_kib / 1024)


def compile_descriptor(tmp: Path, descriptor: Path, service: str) -> Run:
    """``clawc compile`` of a pod that grants one agent every tool of the descriptor (a file
    inside ``tmp``)."""
    pod = tmp / "pod.yml"
    pod.write_text(
        f"""\
x-claw: {{pod: imported}}
services:
  {service}:
    image: example/{service}
    expose: ["8080"]
    x-claw: {{describe: {os.path.relpath(descriptor, tmp)}}}
  agent:
    image: example/agent
    x-claw: {{agent: {{}}, tools: [{service}]}}
"""
    )
    out, err = io.StringIO(), io.StringIO()
    code = clawc(["compile", str(pod), "-o", str(tmp / "build")], out, err)
    return Run(code, out.getvalue(), err.getvalue())
