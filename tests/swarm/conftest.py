"""Fixtures for the Swarm tests (marker ``swarm``): the provisioned engine as a single-node
swarm, the images built locally under tags of their own, and the example pod as a stack."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docker.conftest import _engine_problem, build_images
from tests.swarm.stack import IMAGES, Stack, SwarmEngine

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def swarm_node() -> Iterator[str]:
    problem = _engine_problem()
    if problem is not None:
        hint = 'run: eval "$(scripts/provision-docker.sh up)"'
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{problem}; CI must run the swarm tests ({hint})", pytrace=False)
        pytest.skip(f"{problem}; {hint}")
    engine = SwarmEngine()
    node = engine.join()
    try:
        yield node
    finally:
        engine.leave()


@pytest.fixture(scope="session")
def swarm_images(swarm_node: str) -> dict[str, str]:
    """The compose tests' images under tags of their own (a docker session may run beside)."""
    return build_images(IMAGES)


@pytest.fixture(scope="session")
def stack(
    swarm_node: str, swarm_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    deployed = Stack(tmp_path_factory.mktemp("stack"), REPO, swarm_node)
    try:
        deployed.deploy()
        yield deployed
    finally:
        deployed.remove()
        deployed.cleanup()
