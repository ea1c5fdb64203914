"""``x-claw.edge`` (issue 30, SPEC §10): the connection cap and deadlines of the agents' port,
set in the pod file and compiled into ``sidecar.json``."""

from __future__ import annotations

import json
from pathlib import Path

from clawpod.compiler.output.build import write_build
from clawpod.compiler.pod import compile_pod
from clawpod.sidecar.manifest import load_build
from clawpod.sidecar.server.front.edge import EdgeLimits
from tests.compiler.conftest import TOOL_SERVICES, PodDir


def test_the_bounds_are_set_in_the_pod_file(pod_dir: PodDir, tmp_path: Path) -> None:
    text = f"""\
x-claw:
  edge:
    max-connections: 50
    max-connections-per-peer: 10
    head-timeout-ms: 2000
    body-idle-timeout-ms: 5000
    keepalive-timeout-ms: 20000
services:
{TOOL_SERVICES}  agent:
    image: example/agent
    x-claw: {{agent: {{}}, tools: [svc]}}
"""
    out = tmp_path / "out"
    write_build(compile_pod(pod_dir.pod(text)), out)
    config = json.loads((out / "sidecar.json").read_text())
    assert config["max_connections"] == 50
    limits = EdgeLimits.from_config(load_build(out).config)
    assert (limits.max_connections, limits.max_connections_per_peer) == (50, 10)
    assert (limits.head_timeout_s, limits.body_idle_timeout_s) == (2, 5)
    assert limits.keepalive_timeout_s == 20


def test_an_edge_bound_must_be_positive(pod_dir: PodDir) -> None:
    text = f"""\
x-claw:
  edge: {{max-connections-per-peer: 0}}
services:
{TOOL_SERVICES}  agent:
    image: example/agent
    x-claw: {{agent: {{}}, tools: [svc]}}
"""
    assert "max-connections-per-peer" in str(pod_dir.error(text))
