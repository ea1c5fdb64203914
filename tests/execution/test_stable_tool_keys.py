"""A tool is known by its name, not by which Python object carries it: a copy of a build (a
pickle round trip, ``copy.copy``, ``model_copy``) keeps its grants and its call plan."""

from __future__ import annotations

import copy
import pickle
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from clawpod.sidecar.execution.executor import CallLimits, ToolExecutor
from clawpod.sidecar.governance.gate import GovernedExecutor
from clawpod.sidecar.manifest import AgentBuild, ManagedTool
from clawpod.sidecar.model.conversation import ToolOutcome
from clawpod.sidecar.observability.metrics import Metrics
from tests.mediation.scripted import agent
from tests.support.builds import http_tool
from tests.support.gates import governed
from tests.support.services import ToolService

COPIES: dict[str, Callable[[AgentBuild], AgentBuild]] = {
    "pickle": lambda build: pickle.loads(pickle.dumps(build)),
    "deepcopy": copy.deepcopy,
    "model_copy": lambda build: build.model_copy(
        update={
            "tools": build.tools.model_copy(
                update={"tools": [copy.copy(tool) for tool in build.tools.tools]}
            )
        }
    ),
}


@pytest.fixture
async def service() -> AsyncIterator[ToolService]:
    running = await ToolService().start()
    yield running
    await running.close()


@pytest.fixture
def gate(
    executor: ToolExecutor, metrics: Metrics, service: ToolService, tmp_path: Path
) -> GovernedExecutor:
    return governed(executor, metrics, {"analyst": agent(lookup(service))}, tmp_path)


def lookup(service: ToolService) -> ManagedTool:
    return http_tool("desk", "lookup", service.url, annotations={"readOnlyHint": True})


def the_tool(build: AgentBuild) -> ManagedTool:
    (tool,) = build.tools.tools
    return tool


@pytest.mark.parametrize("copied", COPIES)
async def test_a_copied_build_keeps_its_grants(
    gate: GovernedExecutor, service: ToolService, copied: str
) -> None:
    tool = the_tool(COPIES[copied](agent(lookup(service))))
    checked = gate.check(tool, {})
    assert not isinstance(checked, ToolOutcome), checked
    outcome = await gate.execute("analyst", checked, CallLimits(5.0, 65536))
    assert outcome.error_code is None, outcome.envelope_json()
    assert len(service.requests) == 1


@pytest.mark.parametrize("copied", COPIES)
def test_a_copied_tool_keeps_its_call_plan(
    gate: GovernedExecutor, service: ToolService, copied: str
) -> None:
    """A read-only tool no rule names is repeatable (no journal) and ungoverned (no gate
    steps) in its copy too, not only in the object the sidecar was started with."""
    plan = gate.plans["analyst"]
    tool = the_tool(COPIES[copied](agent(lookup(service))))
    assert tool.name in plan.repeatable
    assert tool.name in plan.ungoverned


async def test_a_same_named_tool_of_another_build_is_not_granted(
    gate: GovernedExecutor, service: ToolService
) -> None:
    """The key names a tool of the build the gate was started with; a tool that only shares
    its name (another service URL here) is refused, as an unknown object was before."""
    impostor = http_tool("desk", "lookup", service.url + "/elsewhere")
    checked = gate.check(impostor, {})
    assert not isinstance(checked, ToolOutcome), checked
    outcome = await gate.execute("analyst", checked, CallLimits(5.0, 65536))
    assert outcome.error_code == "policy_denied"
    assert service.requests == []
