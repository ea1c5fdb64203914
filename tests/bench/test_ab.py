"""bench.ab runs two trees' sidecars side by side, each on a build its own tree writes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.ab import headers_for
from bench.run import Target

REPO = Path(__file__).resolve().parents[2]


def test_a_side_whose_build_lacks_the_agent_is_not_measured() -> None:
    older = Target("base", "http://127.0.0.1:1", {}, None, tokens={"bench-native": "t-native"})
    assert headers_for(older, "destructive_r1") is None
    assert headers_for(older, "openai_json") == {"Authorization": "Bearer t-native"}


@pytest.mark.slow  # two sidecars, the stubs and wrk: about 30 s on 2 shared cores
def test_own_builds_measure_both_sides_of_every_workload() -> None:
    one_short_cell = ["--reps", "1", "--duration", "1"]
    workloads = ["--workload", "openai_json", "destructive_r1"]
    completed = subprocess.run(
        [sys.executable, "-m", "bench.ab", "HEAD", "--own-builds", *one_short_cell, *workloads],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = {
        line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:6]]
        for line in completed.stdout.splitlines()
        if re.match(r"\| (openai_json|destructive_r1) ", line)
    }
    assert set(rows) == {"openai_json", "destructive_r1"}, completed.stdout
    for workload, cells in rows.items():
        for cell in cells:
            assert float(cell) > 0, (workload, completed.stdout)
