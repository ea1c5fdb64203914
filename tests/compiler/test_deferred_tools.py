"""Deferred tools (SPEC §23): a grant's ``defer: true``, the pod's ``defer-tools-over``, written
to agent.json and shown by ``clawc inspect``; bad values are located errors."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from clawpod.cli.inspect import inspect_command
from clawpod.compiler.output.build import write_build
from clawpod.compiler.pod import compile_pod
from clawpod.sidecar.manifest import load_build
from tests.compiler.conftest import TOOL_SERVICES, PodDir


def pod_text(pod_setting: str, grants: str) -> str:
    return f"""\
x-claw:
  {pod_setting}
services:
{TOOL_SERVICES}  bot:
    image: example/agent
    x-claw: {{agent: {{}}, tools: {grants}}}
"""


def deferred_of(pod_dir: PodDir, text: str) -> list[str]:
    [agent] = pod_dir.compile(text).agents
    return agent.deferred


def test_a_grant_defers_its_tools(pod_dir: PodDir) -> None:
    grants = "[{service: svc, allow: [a, b], defer: true}, {service: other, defer: true}, svc]"
    assert deferred_of(pod_dir, pod_text("mode: mediated", grants)) == [
        "svc.a",
        "svc.b",
        "other.x",
        "other.y",
    ]


def test_nothing_is_deferred_unless_asked(pod_dir: PodDir) -> None:
    assert deferred_of(pod_dir, pod_text("mode: mediated", "[svc, other]")) == []


def test_an_agent_over_the_pod_threshold_has_every_tool_deferred(pod_dir: PodDir) -> None:
    over = deferred_of(pod_dir, pod_text("defer-tools-over: 4", "[svc, other]"))
    assert over == ["svc.a", "svc.b", "svc.c", "other.x", "other.y"]
    assert deferred_of(pod_dir, pod_text("defer-tools-over: 5", "[svc, other]")) == []


@pytest.mark.parametrize(
    ("pod_setting", "grants", "named"),
    [
        ("mode: mediated", "[{service: svc, defer: 'yes'}]", "defer"),
        ("defer-tools-over: -1", "[svc]", "defer-tools-over"),
        ("defer-tools-over: '10'", "[svc]", "defer-tools-over"),
        ("defer-tools-over: true", "[svc]", "defer-tools-over"),
    ],
)
def test_bad_values_are_errors_naming_the_setting(
    pod_dir: PodDir, pod_setting: str, grants: str, named: str
) -> None:
    assert named in str(pod_dir.error(pod_text(pod_setting, grants)))


def test_the_build_and_inspect_show_deferred_tools(pod_dir: PodDir, tmp_path: Path) -> None:
    path = pod_dir.pod(pod_text("mode: mediated", "[{service: svc, allow: [a], defer: true}]"))
    out = tmp_path / "out"
    write_build(compile_pod(path), out)
    assert load_build(out).agents["bot"].agent.deferred == ["svc.a"]
    shown = io.StringIO()
    inspect_command(out, shown)
    text = shown.getvalue()
    assert "1 deferred: offered once claw_tool_search finds them" in text
    assert "svc_a (deferred)" in text


def test_a_build_without_deferred_tools_says_nothing_of_them(
    pod_dir: PodDir, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    write_build(compile_pod(pod_dir.pod(pod_text("mode: mediated", "[svc]"))), out)
    assert '"deferred"' not in (out / "context" / "bot" / "agent.json").read_text()
