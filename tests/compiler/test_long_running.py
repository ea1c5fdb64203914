"""``x-claw.long-running`` on a descriptor's tool (SPEC §22): compiled into the manifest,
validated as a boolean where it is written."""

from __future__ import annotations

from pathlib import Path

from clawpod.compiler.output.build import write_build
from clawpod.sidecar.manifest import load_build
from tests.compiler.conftest import PodDir, descriptor, tool

POD = """\
x-claw:
  pod: reports
services:
  reports:
    image: example/reports
    x-claw: {describe: reports.json}
  analyst:
    image: example/agent
    x-claw: {agent: {}, tools: [reports]}
"""


def test_long_running_tools_reach_the_manifest(tmp_path: Path) -> None:
    pod = PodDir(tmp_path)
    pod.descriptor(
        "reports.json",
        descriptor(tool("quarterly", **{"x-claw": {"long-running": True}}), tool("summary")),
    )
    out = tmp_path / "out"
    write_build(pod.compile(POD), out, sidecar_image="example/sidecar")
    tools = {t.name: t.long_running for t in load_build(out).agents["analyst"].tools.tools}
    assert tools == {"reports.quarterly": True, "reports.summary": None}


def test_a_long_running_flag_that_is_no_boolean_is_a_located_error(tmp_path: Path) -> None:
    pod = PodDir(tmp_path)
    pod.descriptor(
        "reports.json", descriptor(tool("quarterly", **{"x-claw": {"long-running": "yes"}}))
    )
    error = pod.error(POD)
    assert "/tools/0/x-claw/long-running" in str(error) and "boolean" in str(error)
