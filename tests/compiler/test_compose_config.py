"""docker compose accepts the generated compose file (skipped where no compose binary exists)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from clawpod.compiler.output.build import write_build
from clawpod.compiler.pod import compile_pod
from tests.compiler.conftest import EXAMPLE_POD


def compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    return [standalone] if standalone else None


def test_docker_compose_config_accepts_the_build(tmp_path: Path) -> None:
    command = compose_command()
    if command is None:
        pytest.skip("no docker compose binary on this machine")
    out = tmp_path / "build"
    write_build(compile_pod(EXAMPLE_POD), out)
    result = subprocess.run(
        [*command, "-f", str(out / "compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin:/usr/local/bin",
            "TRADING_RO_TOKEN": "r",
            "TRADING_RW_TOKEN": "w",
            "NEWS_API_KEY": "n",
            "RESEARCH_API_TOKEN": "m",
        },
    )
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert set(resolved["services"]) == {
        "trading-api",
        "market-news",
        "research-mcp",
        "analyst",
        "trader",
        "claw-sidecar",
    }
    assert resolved["networks"]["claw-agents"]["internal"] is True
