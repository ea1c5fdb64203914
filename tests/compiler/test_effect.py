"""One effect per tool (issue 23): computed once by clawc from the MCP annotations at MCP's
defaults, written into tools.json, and the one answer every reader gives: CONTEXT.md, `clawc
inspect`, approvals, the journal, the taint hold and the engine's duplicates."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from clawpod.cli.inspect import inspect_command
from clawpod.compiler.output.build import write_build
from clawpod.sidecar.governance.gate import needs_approval
from clawpod.sidecar.manifest import Approvals, Effect, ManagedTool, effect_of, load_build
from clawpod.sidecar.model.taint import held_when_tainted
from clawpod.sidecar.state.journal import has_side_effects
from tests.compiler.conftest import PodDir, descriptor, tool
from tests.mediation.scripted import agent, calls, drive, engine_for, request, text

# The tool's annotations -> its effect, MCP's defaults for what it does not state.
CASES = {
    "silent": ({}, Effect.DESTRUCTIVE),
    "nulls": ({"readOnlyHint": None, "destructiveHint": None}, Effect.DESTRUCTIVE),
    "reader": ({"readOnlyHint": True, "destructiveHint": True}, Effect.READ_ONLY),
    "idempotent_only": ({"idempotentHint": True}, Effect.DESTRUCTIVE),
    "destroys_again": ({"destructiveHint": True, "idempotentHint": True}, Effect.DESTRUCTIVE),
    "sets": ({"destructiveHint": False, "idempotentHint": True}, Effect.IDEMPOTENT),
    "adds": ({"destructiveHint": False}, Effect.ADDITIVE),
}
CONTEXT_TEXT = {
    Effect.READ_ONLY: "read-only",
    Effect.IDEMPOTENT: "changes data; repeating it is harmless",
    Effect.ADDITIVE: "changes data",
    Effect.DESTRUCTIVE: "changes data; destructive, not undoable",
}
POD = """\
x-claw:
  pod: desk
services:
  desk:
    image: example/desk
    x-claw: {describe: desk.json}
  analyst:
    image: example/agent
    x-claw: {agent: {}, tools: [desk]}
"""


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = PodDir(tmp_path_factory.mktemp("effect"))
    tools = [tool(name, "POST", annotations=hints) for name, (hints, _) in CASES.items()]
    directory.descriptor("desk.json", descriptor(*tools))
    out = directory.root / "out"
    write_build(directory.compile(POD), out, sidecar_image="example/sidecar")
    return out


def loaded_tools(build: Path) -> dict[str, ManagedTool]:
    agent = load_build(build).agents["analyst"]
    return {t.name.removeprefix("desk."): t for t in agent.tools.tools}


@pytest.mark.parametrize("name", CASES)
def test_clawc_writes_the_effect_into_the_build(build: Path, name: str) -> None:
    tools = json.loads((build / "context/analyst/tools.json").read_text())["tools"]
    written = {t["name"].removeprefix("desk."): t["effect"] for t in tools}
    assert written[name] == CASES[name][1].value
    assert loaded_tools(build)[name].effect is CASES[name][1]


@pytest.mark.parametrize("name", CASES)
def test_every_reader_gives_the_effect_of_the_build(build: Path, name: str) -> None:
    effect = CASES[name][1]
    managed = loaded_tools(build)[name]
    context = (build / "context/analyst/CONTEXT.md").read_text()
    section = context.split(f"### `{managed.presented}`", 1)[1].split("###", 1)[0]
    assert f"- Effect: {CONTEXT_TEXT[effect]}\n" in section
    shown = io.StringIO()
    inspect_command(build, shown)
    row = next(line for line in shown.getvalue().splitlines() if f" {managed.name} " in line)
    assert f" {effect.value} " in row
    assert needs_approval(Approvals(require="destructive"), managed) is (
        effect is Effect.DESTRUCTIVE
    )
    assert needs_approval(Approvals(require="non-read-only"), managed) is (
        effect is not Effect.READ_ONLY
    )
    assert has_side_effects(managed) is not (effect in (Effect.READ_ONLY, Effect.IDEMPOTENT))
    # Tainted requests hold destructive tools (and open-world ones: none declares it here).
    assert held_when_tainted(managed) is (effect is Effect.DESTRUCTIVE)


def test_a_tool_with_no_hints_is_destructive_everywhere(build: Path) -> None:
    silent = loaded_tools(build)["silent"]
    assert effect_of({}) is Effect.DESTRUCTIVE is silent.effect
    assert needs_approval(Approvals(require="destructive"), silent)
    assert has_side_effects(silent) and held_when_tainted(silent)
    context = (build / "context/analyst/CONTEXT.md").read_text()
    section = context.split(f"### `{silent.presented}`", 1)[1].split("###", 1)[0]
    assert "destructive, not undoable" in section


def test_a_build_from_before_the_effect_field_loads_with_the_same_answer(build: Path) -> None:
    """tools.json without ``effect`` (older clawc): the sidecar applies the same rule."""
    for name, (hints, effect) in CASES.items():
        stated = loaded_tools(build)[name].model_dump(by_alias=True, exclude={"effect"})
        assert ManagedTool.model_validate(stated).effect is effect, (name, hints)


@pytest.mark.parametrize("name", CASES)
def test_the_engine_serves_a_repeated_call_again_only_for_a_repeatable_effect(
    build: Path, name: str
) -> None:
    """Two identical calls in one round: one execution; the second gets the first's result
    when the effect is read-only or idempotent, else ``duplicate_call``."""
    managed = loaded_tools(build)[name]
    engine = engine_for("openai", request("openai"), agent(managed))
    twice = calls("openai", ("a", managed.presented, {}), ("b", managed.presented, {}))
    run = drive(engine, [twice, text("openai", "ok")])
    assert [e.call.id for e in run.executions] == ["a"]
    second = json.loads(run.upstream_bodies[1]["messages"][-1]["content"])
    repeatable = CASES[name][1] in (Effect.READ_ONLY, Effect.IDEMPOTENT)
    assert second["ok"] is repeatable
    if not repeatable:
        assert second["error"]["code"] == "duplicate_call"
