"""What ``python -m clawpod.sidecar`` tells a newcomer before serving: its version, the log
levels it takes, the environment it reads, and every configured feature that cannot work
with the environment it was given (the compiled example pod, as a real process)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from clawpod.cli.clawc import main as clawc
from tests.compiler.test_kubernetes import EXAMPLE

# Strong enough for the operator door (server/operator/operator_auth.py refuses short tokens at
# start).
OPERATOR_TOKEN = "start-checks-operator-6c1e9a3f5b7d2c4e8a0f"
STARTUP_GUARD_S = 30  # a deadlock guard for the child process, not a timing assertion
EXAMPLE_CREDENTIALS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "TRADING_RO_TOKEN",
    "TRADING_RW_TOKEN",
    "NEWS_API_KEY",
    "RESEARCH_API_TOKEN",
)


def sidecar(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "clawpod.sidecar", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=STARTUP_GUARD_S,
        check=False,
    )


def test_version() -> None:
    done = sidecar("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("clawpod sidecar ")


def test_log_level_takes_only_known_levels() -> None:
    done = sidecar("--build", "b", "--log-level", "verbose")
    assert done.returncode == 2
    assert "invalid choice: 'VERBOSE'" in done.stderr
    assert "DEBUG, INFO, WARNING, ERROR" in done.stderr or "'DEBUG', 'INFO'" in done.stderr


def test_help_lists_the_environment_it_reads() -> None:
    done = sidecar("--help")
    assert done.returncode == 0
    section = done.stdout.partition("environment:")[2]
    for name in (
        "CLAW_AUDIT_KEY",
        "CLAW_OPERATOR_TOKEN",
        "CLAW_WEBHOOK_SECRET",
        "NAME_FILE",
        "CLAW_INSTANCE",
        "CLAW_SSE_KEEPALIVE_MS",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ):
        assert name in section, name
    assert "{DEBUG,INFO,WARNING,ERROR}" in done.stdout


@pytest.fixture(scope="module")
def example_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("example") / "build"
    assert clawc(["compile", str(EXAMPLE), "-o", str(out)], io.StringIO(), io.StringIO()) == 0
    return out


def started_stderr(build: Path, state: Path, env: dict[str, str]) -> str:
    """What the sidecar wrote to stderr by the time it listens; then it is stopped."""
    process = subprocess.Popen(
        [sys.executable, "-m", "clawpod.sidecar", "--build", str(build), "--host", "127.0.0.1",
         "--port", "0", "--admin-port", "0", "--state-dir", str(state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening on "), line
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=STARTUP_GUARD_S)
    return stderr


def test_a_pod_whose_approvals_no_one_can_decide_is_named_at_start(
    example_build: Path, tmp_path: Path
) -> None:
    """The example holds every order for an operator; without an operator token it would
    start silently and every order would wait until it expired."""
    env = {k: v for k, v in os.environ.items() if k != "CLAW_OPERATOR_TOKEN"}
    env |= {name: "set" for name in EXAMPLE_CREDENTIALS}
    stderr = started_stderr(example_build, tmp_path / "a", env)
    assert "CLAW_OPERATOR_TOKEN is not set" in stderr
    assert "no one can decide them" in stderr
    stderr = started_stderr(
        example_build, tmp_path / "b", env | {"CLAW_OPERATOR_TOKEN": OPERATOR_TOKEN}
    )
    assert "CLAW_OPERATOR_TOKEN" not in stderr
    assert "is not set" not in stderr


def test_a_service_credential_that_is_not_set_is_named_at_start(
    example_build: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "CLAW_OPERATOR_TOKEN": OPERATOR_TOKEN}
    env |= {name: "set" for name in EXAMPLE_CREDENTIALS if name != "NEWS_API_KEY"}
    env.pop("NEWS_API_KEY", None)
    stderr = started_stderr(example_build, tmp_path / "state", env)
    assert (
        "NEWS_API_KEY is not set: calls of market-news.get_article, market-news.search_news "
        "are refused"
    ) in stderr
    assert "TRADING_RO_TOKEN" not in stderr
