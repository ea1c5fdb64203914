"""Every CEL rule the docs show compiles against the example services it names: a reader who
copies one gets a working rule (the glob example in docs/governance.md once did not compile)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import yaml

from clawpod.compiler.services.descriptors import load_descriptor
from clawpod.compiler.services.sources import FileSource
from clawpod.sidecar.model.rules import condition_problem, tool_matches
from tests.compiler.conftest import REPO

YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.DOTALL | re.MULTILINE)
# A rule written inline in prose: `{tool: ..., when: ..., effect: ...}` (it may wrap lines).
INLINE_RULE = re.compile(r"`(\{tool:[^`]*\bwhen:[^`]*\})`")
DOCUMENTS = sorted(
    [*REPO.glob("docs/**/*.md"), REPO / "README.md", *REPO.glob("compose/examples/*/pod.yml")]
)


def example_tools() -> dict[str, SimpleNamespace]:
    """Canonical name -> what a condition is checked against, for every example descriptor."""
    tools = {}
    for path in sorted((REPO / "descriptors").glob("*.*")):
        for compiled in load_descriptor(FileSource(path)).tools:
            name = f"{path.stem}.{compiled.name}"
            tools[name] = SimpleNamespace(
                name=name, input_schema=compiled.input_schema, annotations=compiled.annotations
            )
    return tools


def rules_in(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        if "when" in value and "tool" in value:
            yield value
        for item in value.values():
            yield from rules_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from rules_in(item)


def documented_rules() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in DOCUMENTS:
        text = path.read_text()
        blocks = [text] if path.suffix == ".yml" else YAML_BLOCK.findall(text)
        blocks += INLINE_RULE.findall(text) if path.suffix == ".md" else []
        for block in blocks:
            if "when:" not in block:
                continue  # an excerpt with "..." elisions need not be YAML; one with a rule must
            found += [
                (path.relative_to(REPO).as_posix(), r) for r in rules_in(yaml.safe_load(block))
            ]
    return found


def test_every_documented_rule_compiles_against_every_tool_it_matches() -> None:
    tools = example_tools()
    rules = documented_rules()
    assert len(rules) >= 4  # governance.md, security.md, the example pod: the search finds them
    problems = []
    for where, rule in rules:
        matched = [tool for name, tool in tools.items() if tool_matches(rule["tool"], name)]
        if not matched:  # a service of the prose's own (desk.*): a tool without arguments
            schema = {"type": "object", "properties": {}}
            matched = [SimpleNamespace(name=rule["tool"], input_schema=schema, annotations={})]
        for tool in matched:
            problem = condition_problem(rule["when"], "analyst", tool)
            if problem is not None:
                problems.append(f"{where}: {rule['when']!r} on {tool.name}: {problem}")
    assert problems == []
