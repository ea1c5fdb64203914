"""The benchmark runs end to end with tiny load and reports every scenario (never its timings)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # about 40 s on 2 shared cores


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    output = tmp_path_factory.mktemp("bench") / "result.json"
    completed = subprocess.run(
        ["bash", "bench/run.sh", "--quick", "--output", str(output)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={"CLAWPOD_PYTHON": sys.executable, "PATH": "/usr/bin:/bin:/usr/local/bin"},
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(output.read_text()), completed.stdout


def test_reports_every_section(quick_run: tuple[dict, str]) -> None:
    results, _ = quick_run
    for key in ("meta", "interleaved_c1", "throughput", "ttfb", "mediated", "memory", "compile"):
        assert key in results, key
    assert {
        "derived",
        "ratios",
        "targets",
        "skipped",
        "sidecar_reported_connections",
    } <= results.keys()
    assert results["meta"]["quick"] is True
    assert results["skipped"]["litellm"]
    # The sidecar ran (python -m clawpod.sidecar with an audit key) and its operator listener
    # answered /metrics.
    assert "sidecar" not in results["skipped"], results["skipped"]
    assert "skipped" not in results["sidecar_reported_connections"]
    assert results["sidecar_reported_connections"], results["sidecar_reported_connections"]


def test_pass_through_cells_have_latency_throughput_and_cpu(quick_run: tuple[dict, str]) -> None:
    results, _ = quick_run
    for target in ("direct", "bare", "sidecar"):
        for workload in ("openai_json", "openai_sse", "anthropic_json"):
            for cell in results["throughput"][target][workload].values():
                assert cell["errors"] == 0, (target, workload, cell)
                assert cell["requests"] > 0
                assert set(cell["latency"]) == {"p50_ms", "p90_ms", "p99_ms"}
                assert cell["upstream_requests"] >= cell["requests"]
                if target != "direct":
                    assert "proxy_cpu_ms_per_request" in cell


def test_streams_are_timed_to_first_byte(quick_run: tuple[dict, str]) -> None:
    results, _ = quick_run
    for target in ("direct", "bare", "sidecar"):
        for run in results["ttfb"][target].values():
            assert run["errors"] == 0
            assert set(run["ttfb"]) == {"p50_ms", "p90_ms", "p99_ms"}


def test_interleaved_concurrency_one_covers_every_running_target(
    quick_run: tuple[dict, str],
) -> None:
    results, _ = quick_run
    for workload in ("openai_json", "gap_sse"):
        measured = results["interleaved_c1"][workload]
        assert set(measured) == {"direct", "bare", "sidecar"}
        for run in measured.values():
            assert run["errors"] == 0
            assert run["requests"] > 0
    added = results["derived"]["interleaved_c1_added_ms"]
    assert set(added["latency_openai_json"]) == {"bare", "sidecar"}
    assert set(added["ttfb_openai_sse"]) == {"bare", "sidecar"}


def test_mediated_requests_run_the_scripted_tool_rounds(quick_run: tuple[dict, str]) -> None:
    results, _ = quick_run
    rounds = results["mediated"]["rounds"]
    assert rounds["0"]["1"]["tool_requests"] == 0
    for count in ("1", "3"):
        for cell in rounds[count].values():
            assert cell["errors"] == 0
            assert cell["tool_requests"] >= int(count) * cell["requests"]
            assert cell["upstream_requests"] >= (int(count) + 1) * cell["requests"]
    assert "cpu_ms_per_round" in results["derived"]["mediated"]


def test_memory_compile_reuse_and_table(quick_run: tuple[dict, str]) -> None:
    results, stdout = quick_run
    memory = results["memory"]
    assert memory["completed_streams"] == memory["clients"]
    assert memory["rss_peak_mb"] > 0
    assert "seconds_best" in results["compile"], results["compile"]
    reuse = results["derived"]["keepalive_reuse"]["sidecar"]
    assert {"upstream", "tool"} <= reuse.keys()
    assert len(results["targets"]) >= 14
    assert "SPEC §6 target" in stdout
    assert "sc/direct" in stdout
