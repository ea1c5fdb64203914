"""Fixtures for the end-to-end tests on a real Docker engine (marker ``docker``).

One pod runs for the whole session: the example trading desk compiled from a test copy of its
pod file whose providers point at a scripted upstream container, plus a compose override that
swaps the agents for a probe image and puts that upstream on ``claw-egress`` only. Images are
built once per session from ``$CLAW_BASE_IMAGE`` (default ``python:3.11-slim``; the agent image
from ``$CLAW_AGENT_BASE_IMAGE`` when set).

Without a reachable engine the tests skip, except under CI (``CI=true``) where they fail.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import DockerException

from tests.docker.pod import IMAGES, Pod, PodFiles

REPO = Path(__file__).resolve().parents[2]


def _engine_problem() -> str | None:
    try:
        docker.from_env().ping()
    except DockerException as exc:
        return f"no Docker engine reachable ({exc})"
    compose = subprocess.run(
        ["docker", "compose", "version"], capture_output=True, text=True, check=False
    )
    if compose.returncode != 0:
        return f"docker compose v2 is not available ({compose.stderr.strip()})"
    return None


@pytest.fixture(scope="session", autouse=True)
def docker_engine() -> None:
    problem = _engine_problem()
    if problem is None:
        return
    hint = 'run: eval "$(scripts/provision-docker.sh up)"'
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{problem}; CI must run the docker tests ({hint})", pytrace=False)
    pytest.skip(f"{problem}; {hint}")


def _image_id(tag: str) -> str | None:
    result = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", tag],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip() if result.returncode == 0 else None


def _build(tag: str, context: Path, base_image: str) -> None:
    previous = _image_id(tag)
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    command = ["docker", "build", "-q", "--build-arg", f"BASE_IMAGE={base_image}", "-t", tag]
    result = subprocess.run(
        [*command, str(context)], capture_output=True, text=True, env=env, check=False
    )
    if result.returncode != 0:
        pytest.fail(f"docker build {context} failed:\n{result.stderr}", pytrace=False)
    if previous and previous != _image_id(tag):
        # The image this session replaced is untagged now; do not let them pile up across runs.
        subprocess.run(["docker", "image", "rm", previous], capture_output=True, check=False)


def build_images(tags: dict[str, str]) -> dict[str, str]:
    """Build every image the pod runs under ``tags`` (role -> tag); returns ``tags``."""
    base_image = os.environ.get("CLAW_BASE_IMAGE", "python:3.11-slim")
    # The agent image may start from a base that already has its SDKs (provision-docker.sh).
    agent_base_image = os.environ.get("CLAW_AGENT_BASE_IMAGE", base_image)
    example = REPO / "compose" / "examples" / "trading-desk"
    contexts = {
        "sidecar": REPO,
        "upstream": REPO / "tests" / "docker" / "upstream",
        "agent": REPO / "tests" / "docker" / "agent",
        "trading-api": example / "trading-api",
        "market-news": example / "market-news",
        "research-mcp": example / "research-mcp",
    }
    for role, context in contexts.items():
        _build(tags[role], context, agent_base_image if role == "agent" else base_image)
    return tags


def build_store_image(tag: str) -> str:
    """The shared-limits store (tests/docker/store): Debian trixie's valkey-server on the
    newest Python image the provisioning makes (CI's fresh-install phase uses it too); ``tag``."""
    newest = subprocess.run(
        [str(REPO / "scripts" / "provision-docker.sh"), "newest"],
        capture_output=True,
        text=True,
        check=False,
    )
    if newest.returncode != 0:
        pytest.fail(f"provision-docker.sh newest failed:\n{newest.stderr}", pytrace=False)
    _build(tag, REPO / "tests" / "docker" / "store", newest.stdout.strip())
    return tag


@pytest.fixture(scope="session")
def images(docker_engine: None) -> dict[str, str]:
    """Build every image the pod runs, once; returns role -> tag."""
    return build_images(IMAGES)


@pytest.fixture(scope="session")
def pod(images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    files = PodFiles.write(tmp_path_factory.mktemp("pod"), REPO)
    running = Pod(files)
    running.start()
    try:
        yield running
    finally:
        running.stop()
