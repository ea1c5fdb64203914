"""``python -m clawpod.sidecar`` refuses to start without an audit key (unless told to run
unkeyed) and on a log whose head is gone (issue 14 finding 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from clawpod.sidecar.audit.log import AUDIT_KEY_ENV
from tests.support import secret_sweep
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.sidecar import TEST_AUDIT_KEY, TEST_PROVIDER_KEYS

GUARD_S = 60  # a deadlock guard for the child process, not a timing assertion


def start(tmp_path: Path, *flags: str, key: str | None) -> subprocess.Popen[str]:
    build = tmp_path / "build"
    if not build.exists():
        write_build(build, [AgentSpec("agent")], providers_for("http://127.0.0.1:9"))
    env = {k: v for k, v in os.environ.items() if k != AUDIT_KEY_ENV} | TEST_PROVIDER_KEYS
    if key is not None:
        env[AUDIT_KEY_ENV] = key
    command = [
        sys.executable,
        "-m",
        "clawpod.sidecar",
        "--build",
        str(build),
        "--port",
        "0",
        "--admin-port",
        "0",
    ]
    command += ["--host", "127.0.0.1", "--state-dir", str(tmp_path / "state"), *flags]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def refusal(process: subprocess.Popen[str]) -> str:
    stdout, stderr = process.communicate(timeout=GUARD_S)
    secret_sweep.collect("sidecar stderr", stderr + stdout)
    assert process.returncode == 1, stderr
    assert "listening on" not in stdout
    return stderr


def started(process: subprocess.Popen[str]) -> None:
    try:
        assert process.stdout is not None
        assert "listening on" in process.stdout.readline()
    finally:
        process.terminate()
        process.communicate(timeout=GUARD_S)


def test_a_missing_key_is_a_clear_start_up_error(tmp_path: Path) -> None:
    stderr = refusal(start(tmp_path, key=None))
    assert f"refusing to start: {AUDIT_KEY_ENV} is not set" in stderr
    assert "--allow-unkeyed-audit" in stderr and "Traceback" not in stderr


def test_an_operator_may_run_unkeyed_by_saying_so(tmp_path: Path) -> None:
    started(start(tmp_path, "--allow-unkeyed-audit", key=None))


def test_a_short_key_is_refused_even_with_the_allow_flag(tmp_path: Path) -> None:
    stderr = refusal(start(tmp_path, "--allow-unkeyed-audit", key="short"))
    assert "CLAW_AUDIT_KEY is too short" in stderr


def test_a_log_without_its_head_stops_the_start(tmp_path: Path) -> None:
    started(start(tmp_path, key=TEST_AUDIT_KEY))
    audit = tmp_path / "state" / "audit"
    assert (audit / "agent.head").exists()  # written at start, before any request
    (audit / "agent.jsonl").write_bytes(b'{"id": "a record"}\n')
    (audit / "agent.head").unlink()
    stderr = refusal(start(tmp_path, key=TEST_AUDIT_KEY))
    assert "agent.jsonl has records but its head agent.head is missing" in stderr
    assert "Traceback" not in stderr
