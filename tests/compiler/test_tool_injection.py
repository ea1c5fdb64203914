"""``tool-injection`` (SPEC §7.3): a pod default, an agent override, written to agent.json."""

from __future__ import annotations

import json
from pathlib import Path

from clawpod.compiler.output.build import write_build
from clawpod.compiler.pod import compile_pod
from tests.compiler.conftest import TOOL_SERVICES, PodDir


def pod_text(pod_setting: str, agent_setting: str) -> str:
    return f"""\
x-claw:
  {pod_setting}
services:
{TOOL_SERVICES}  plain:
    image: example/agent
    x-claw: {{agent: {{}}, tools: [svc]}}
  eager:
    image: example/agent
    x-claw: {{agent: {{}}, tools: [svc], {agent_setting}}}
"""


def injection_of(out: Path, agent: str) -> str:
    return json.loads((out / "context" / agent / "agent.json").read_text())["tool_injection"]


def test_the_default_is_auto_and_an_agent_may_say_always(pod_dir: PodDir, tmp_path: Path) -> None:
    path = pod_dir.pod(pod_text("mode: mediated", "tool-injection: always"))
    out = tmp_path / "out"
    write_build(compile_pod(path), out)
    assert injection_of(out, "plain") == "auto"
    assert injection_of(out, "eager") == "always"


def test_the_pod_default_applies_to_agents_that_say_nothing(pod_dir: PodDir) -> None:
    pod = pod_dir.compile(pod_text("tool-injection: always", "tool-injection: auto"))
    by_id = {agent.id: agent.tool_injection for agent in pod.agents}
    assert by_id == {"plain": "always", "eager": "auto"}


def test_an_unknown_value_is_an_error_naming_the_setting(pod_dir: PodDir) -> None:
    error = pod_dir.error(pod_text("mode: mediated", "tool-injection: sometimes"))
    assert "tool-injection" in str(error)


def test_a_tool_service_may_not_set_it(pod_dir: PodDir) -> None:
    text = pod_text("mode: mediated", "mode: mediated").replace(
        "x-claw: {describe: svc.json}", "x-claw: {describe: svc.json, tool-injection: always}"
    )
    assert "tool-injection" in str(pod_dir.error(text))
