"""Descriptors found through the claw.describe image label (needs a Docker engine)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.compiler.conftest import PodDir, granted

pytestmark = pytest.mark.docker

DOCKERFILE = """\
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
WORKDIR /srv/claw
COPY descriptor.yaml skill.md ./
LABEL claw.describe=descriptor.yaml
"""
DESCRIPTOR = """\
version: 2
skill: skill.md
tools:
  - name: ping
    description: Answers pong.
    inputSchema: {type: object}
    annotations: {readOnly: true}
    http: {method: GET, path: /ping}
"""


def test_descriptor_and_skill_are_read_from_the_image(pod_dir: PodDir, tmp_path: Path) -> None:
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException:
        pytest.skip("no Docker engine")
    context = tmp_path / "image"
    context.mkdir()
    (context / "Dockerfile").write_text(DOCKERFILE)
    (context / "descriptor.yaml").write_text(DESCRIPTOR)
    (context / "skill.md").write_text("Ping before anything else.\n")
    tag = "clawpod-test/labelled:latest"
    base = os.environ.get("CLAW_BASE_IMAGE", "python:3.11-slim")
    try:
        client.images.get(base)
    except docker.errors.ImageNotFound:
        pytest.skip(f"base image {base} is not present locally (set CLAW_BASE_IMAGE)")
    client.images.build(path=str(context), tag=tag, buildargs={"BASE_IMAGE": base}, rm=True)
    try:
        text = (
            f"services:\n  pinger:\n    image: {tag}\n"
            "  bot:\n    image: x\n    x-claw: {agent: {}, tools: [pinger]}\n"
        )
        pod = pod_dir.compile(text)
        assert granted(pod, "bot") == ["pinger.ping"]
        loaded = pod.tool_services["pinger"].loaded
        assert loaded.skill_text == "Ping before anything else.\n"
        assert loaded.source == f"image {tag}:/srv/claw/descriptor.yaml"
        assert not client.containers.list(all=True, filters={"ancestor": tag})
    finally:
        client.images.remove(tag, force=True)
