"""Property-based fuzzing of pod files and service descriptors: whatever ``clawc validate``
is given, it either accepts it or prints a clear compile error (exit 1) naming the file;
never a traceback, never an "internal error".

Inputs are a valid pod and descriptor with values replaced, keys removed or added at random
places, plus arbitrary YAML documents and bytes.
"""

from __future__ import annotations

import copy
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clawpod.cli.clawc import main
from clawpod.sidecar.path_template import (
    PLACEHOLDER,
    PathTemplateError,
    check_path_template,
    split_path_template,
)

SETTINGS = settings(
    max_examples=int(os.environ.get("CLAW_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

DESCRIPTOR: dict[str, Any] = {
    "version": 2,
    "description": "Trading desk API.",
    "auth": {"type": "bearer", "env": "TRADING_API_TOKEN"},
    "tools": [
        {
            "name": "get_quote",
            "description": "Quote for a symbol.",
            "inputSchema": {
                "type": "object",
                "properties": {"symbol": {"type": "string"}},
                "required": ["symbol"],
            },
            "annotations": {"readOnlyHint": True},
            "http": {"method": "GET", "path": "/quotes/{symbol}"},
        },
        {
            "name": "execute_trade",
            "description": "Place an order.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "symbol": {"type": "string"},
                    "side": {"enum": ["buy", "sell"]},
                    "quantity": {"type": "number", "exclusiveMinimum": 0},
                    "meta": {"$ref": "#/$defs/meta"},
                },
                "$defs": {"meta": {"type": "object"}},
                "required": ["symbol", "side", "quantity"],
            },
            "annotations": {"destructiveHint": True},
            "http": {"method": "post", "path": "/trades/{claw_id}", "body_key": "trade"},
        },
    ],
    "endpoints": [{"method": "GET", "path": "/healthz", "description": "docs"}],
}
POD: dict[str, Any] = {
    "x-claw": {
        "pod": "desk",
        "mode": "mediated",
        "on-mixed": "refuse",
        "tools-defaults": [{"service": "trading-api", "allow": ["get_quote"]}],
        "tool-policy-defaults": {"max-rounds": 8, "timeout-per-tool-ms": 30000},
    },
    "services": {
        "trading-api": {
            "image": "example/trading",
            "expose": ["4000"],
            "environment": {"TRADING_API_TOKEN": "${TRADING_API_TOKEN}"},
            "x-claw": {"describe": "trading.json"},
        },
        "analyst": {"image": "example/agent", "x-claw": {"agent": {}}},
        "trader": {
            "image": "example/agent",
            "x-claw": {
                "agent": {"count": 2},
                "mode": "native",
                "tools": ["...", {"service": "trading-api", "allow": ["execute_trade"]}],
                "tool-policy": {"max-rounds": 4},
            },
        },
    },
}

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=16)
    | st.sampled_from(["all", "...", "none", "GET", "{x}", "/a/{b}", "#/$defs/x", "-1", "0"])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """Every location in a JSON tree (dict keys and list indexes)."""
    found = [prefix]
    if isinstance(tree, dict):
        for key, value in tree.items():
            found += paths(value, (*prefix, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            found += paths(value, (*prefix, index))
    return found


@st.composite
def mutated(draw: st.DrawFn, original: dict[str, Any]) -> Any:
    tree = copy.deepcopy(original)
    for _ in range(draw(st.integers(1, 3))):
        locations = paths(tree)
        where = draw(st.sampled_from(locations))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if not where:
            tree = draw(VALUES) if action == "replace" else tree
            continue
        parent = tree
        try:
            for step in where[:-1]:
                parent = parent[step]
        except (KeyError, IndexError, TypeError):
            continue
        last = where[-1]
        if action == "replace":
            parent[last] = draw(VALUES)
        elif action == "delete":
            del parent[last]
        elif isinstance(parent[last], dict):
            parent[last][draw(st.text(max_size=10))] = draw(VALUES)
        elif isinstance(parent[last], list):
            parent[last].append(draw(VALUES))
    return tree


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("compiler-fuzz")


def validate(workdir: Path, pod: str | bytes, descriptor: str | bytes) -> tuple[int, str]:
    pod_path = workdir / "pod.yml"
    for path, content in ((pod_path, pod), (workdir / "trading.json", descriptor)):
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out, err = io.StringIO(), io.StringIO()
    code = main(["validate", str(pod_path)], stdout=out, stderr=err)
    errors = err.getvalue()
    assert code in (0, 1), (code, errors)
    assert "Traceback" not in errors and "internal error" not in errors, errors
    if code == 1:
        assert errors.startswith("clawc: error:") and len(errors) > 20, errors
        assert "pod.yml" in errors or "trading.json" in errors, errors
    return code, errors


def _dump_json(value: Any) -> str:
    return json.dumps(value, allow_nan=True)


def test_the_unmutated_inputs_are_valid(workdir: Path) -> None:
    """Not vacuous: the seed pod and descriptor compile, so mutations probe real checks."""
    code, errors = validate(workdir, yaml.safe_dump(POD), _dump_json(DESCRIPTOR))
    assert code == 0, errors


@SETTINGS
@given(descriptor=mutated(DESCRIPTOR))
def test_mutated_descriptors(workdir: Path, descriptor: Any) -> None:
    validate(workdir, yaml.safe_dump(POD), _dump_json(descriptor))


@SETTINGS
@given(pod=mutated(POD))
def test_mutated_pods(workdir: Path, pod: Any) -> None:
    validate(workdir, yaml.safe_dump(pod, allow_unicode=True), _dump_json(DESCRIPTOR))


@SETTINGS
@given(pod=st.binary(max_size=300) | st.text(max_size=300), descriptor=st.binary(max_size=300))
def test_arbitrary_bytes(workdir: Path, pod: bytes | str, descriptor: bytes) -> None:
    validate(workdir, pod, descriptor)
    validate(workdir, yaml.safe_dump(POD), descriptor)


YAML_TRICKS = [
    "x-claw: &a [*a]\nservices: {}\n",  # recursive alias
    "services: !!python/object:os.system {}\n",
    "services:\n  a: {x-claw: {agent: {}}}\n  a: {image: b}\n",  # duplicate key
    "x-claw: {pod: " + "[" * 200 + "]" * 200 + "}\n",
    "\ufeffservices: {}\n",
    "services: {}\n---\nservices: {}\n",
    "a: b: c\n",
    "x-claw: " + "[" * 50_000 + "]" * 50_000 + "\n",
    "x-claw: &a {b: *a}\nservices: {}\n",
    "services:\n\tbad-tab: {}\n",
    # an alias bomb: 9**9 nodes from ~300 bytes
    'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
    + "".join(
        f"a{i}: &a{i} [{','.join(['*a' if i == 1 else f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
    )
    + "services: {}\n",
]


@pytest.mark.parametrize("pod", YAML_TRICKS)
def test_yaml_tricks(workdir: Path, pod: str) -> None:
    validate(workdir, pod, _dump_json(DESCRIPTOR))


@pytest.mark.parametrize("descriptor", ["[" * 100_000 + "]" * 100_000, '{"version": 2' + "}" * 9])
def test_descriptor_tricks(workdir: Path, descriptor: str) -> None:
    code, _ = validate(workdir, yaml.safe_dump(POD), descriptor)
    assert code == 1


@SETTINGS
@given(template=st.text(max_size=40) | st.from_regex(r"/[a-z{}%/?# .]{0,20}", fullmatch=True))
def test_path_templates_are_accepted_or_refused_with_a_reason(template: str) -> None:
    """The compiler and the executor share this grammar: a template either fails with a
    reason, or splits into literals that hold no brace and names the placeholder rule accepts."""
    try:
        check_path_template(template)
    except PathTemplateError as exc:
        assert str(exc)
        return
    parts = split_path_template(template)
    assert all("{" not in p and "}" not in p for p in parts[::2])
    assert all(PLACEHOLDER.fullmatch("{" + name + "}") for name in parts[1::2])
    assert not any(c in template for c in " ?#\r\n")
