"""The rules' language (SPEC §9.2), sans-IO, read alike by ``clawc compile`` (which checks
every rule) and the sidecar (``governance/policy.py``, which applies them): a rule names tools
by a glob (:func:`tool_matches`) and may hold a CEL condition over ``args``, ``agent``,
``tool``, ``annotations`` and ``request`` (its taint, §17).

CEL is evaluated by ``common-expression-language`` (bindings to the Rust CEL implementation).
That library checks syntax but has no type checker, so ``clawc compile`` checks a condition by
evaluating it against a sample of every field the tool's input schema declares
(:func:`condition_problem`): unknown fields, operators applied to the wrong types and
non-boolean results are compile errors. The same functions run in the sidecar.

Strings are compared as they are: ``args.symbol == "NVDA"`` does not match ``"nvda"``. Rules
normalise explicitly with cel-go's strings extension, which the library ships
(``cel.stdlib``): ``lowerAscii()``, ``upperAscii()``, ``trim()`` and the rest of it, so
``args.symbol.upperAscii() == "NVDA"``. :func:`exact_string_comparisons` finds ``==``, ``!=``
and ``in`` applied straight to a free-form string argument, for a compile warning.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cel
from cel.stdlib import EXTENSIONS

from ..manifest import MCP_DEFAULT_ANNOTATIONS, ManagedTool
from .schema_refs import resolve_local_ref

# cel-go's strings extension (lowerAscii, upperAscii, trim, ...): case-aware rules need it.
STRING_FUNCTIONS = EXTENSIONS["strings"]
_CALLS_A_STRING_FUNCTION = re.compile(
    r"\b(?:" + "|".join(re.escape(name) for name in STRING_FUNCTIONS) + r")\s*\("
)
# ``request`` of a call no tainted request makes (an MCP call, compile-time checks): §17.
UNTAINTED_REQUEST: Mapping[str, Any] = {"tainted": False, "taint_sources": []}


class ConditionError(Exception):
    """A CEL condition that does not parse, or cannot be evaluated on these arguments."""


@dataclass(frozen=True, slots=True)
class Condition:
    program: Any
    # The functions cost a context per evaluation (about half again): only rules that call
    # one pay for it.
    calls_functions: bool

    def execute(self, variables: dict[str, Any]) -> Any:
        if self.calls_functions:
            return self.program.execute(cel.Context(variables, STRING_FUNCTIONS))
        return self.program.execute(variables)


def compile_condition(text: str) -> Condition:
    """The compiled CEL program of ``text``; raises :class:`ConditionError`."""
    try:
        program = cel.compile(text)
    except (ValueError, RuntimeError, TypeError) as exc:
        raise ConditionError(str(exc)) from None
    return Condition(program, _CALLS_A_STRING_FUNCTION.search(text) is not None)


def annotations_of(tool: ManagedTool | Mapping[str, Any]) -> dict[str, Any]:
    declared = tool.annotations if isinstance(tool, ManagedTool) else tool
    return {**MCP_DEFAULT_ANNOTATIONS, **declared}


def activation(
    agent: str,
    tool: str,
    annotations: dict[str, Any],
    args: Any,
    request: Mapping[str, Any] = UNTAINTED_REQUEST,
) -> dict[str, Any]:
    return {
        "args": args,
        "agent": agent,
        "tool": tool,
        "annotations": annotations,
        "request": dict(request),
    }


def evaluate(condition: Condition, variables: dict[str, Any]) -> bool:
    """The condition's value; anything but a boolean is a :class:`ConditionError`."""
    try:
        value = condition.execute(variables)
    except (ValueError, RuntimeError, TypeError, KeyError, OverflowError) as exc:
        raise ConditionError(_message(exc)) from None
    if not isinstance(value, bool):
        raise ConditionError(f"the condition gives {type(value).__name__}, not a boolean")
    return value


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"no field {exc.args[0]!r}" if exc.args else "no such field"
    return str(exc).split("\n", 1)[0]


def sample_of(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """A value of the type ``schema`` declares, with every declared property present."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > 32:
        return None
    reference = _local_ref(schema)
    if reference is not None:
        return sample_of(_ref_target(root, reference), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return sample_of(schema[key][0], root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    samples: dict[str, Any] = {"string": "x", "integer": 1, "number": 1.5, "boolean": True}
    if kind in samples:
        return samples[kind]
    if kind == "array":
        return [sample_of(schema.get("items", {}), root, depth + 1)]
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        return {name: sample_of(sub, root, depth + 1) for name, sub in properties.items()}
    return None


def as_declared(schema: Any, value: Any, root: Any = None, depth: int = 0) -> Any:
    """``value`` with every whole number the schema declares a ``number`` made a float, so a
    condition sees the types it was checked with (JSON does not tell 10 from 10.0)."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > 32:
        return value
    reference = _local_ref(schema)
    if reference is not None:
        return as_declared(_ref_target(root, reference), value, root, depth + 1)
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "number" in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        return {
            key: as_declared(properties[key], item, root, depth + 1) if key in properties else item
            for key, item in value.items()
        }
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [as_declared(schema["items"], item, root, depth + 1) for item in value]
    return value


def condition_problem(text: str, agent: str, tool: ManagedTool | Any) -> str | None:
    """Why ``text`` is not a usable condition for ``tool`` (None when it is): it must parse,
    name only the rule variables, and give a boolean on a sample of the tool's arguments."""
    try:
        program = compile_condition(text)
        variables = activation(
            agent,
            tool.name,
            annotations_of(tool.annotations),
            sample_of(tool.input_schema),
            # Tainted, so a condition's checks behind `request.tainted &&` are evaluated too.
            {"tainted": True, "taint_sources": [tool.name]},
        )
        evaluate(program, variables)
    except ConditionError as exc:
        return str(exc)
    return None


# ``args.a.b == "x"``, ``args.a != 'x'``, ``args.a in [...]``, ``"x" == args.a`` and
# ``args.a.startsWith("x")`` (endsWith, contains): an argument compared as it is, not through
# lowerAscii() or another function first.
_FIELD = r"args((?:\.[A-Za-z_][A-Za-z0-9_]*)+)"
_EXACT_COMPARISON = re.compile(
    _FIELD + r"\s*(==|!=|\bin\b)(?!\s*\()"
    r"|(?:\"[^\"]*\"|'[^']*')\s*(==|!=)\s*" + _FIELD + r"(?![\w.(])"
    r"|" + _FIELD + r"\.(?:startsWith|endsWith|contains)\s*\("
)


def exact_string_comparisons(text: str, input_schema: Any) -> list[str]:
    """The free-form string arguments (no ``enum``, ``const`` or ``pattern``) that ``text``
    compares exactly, as ``args.x``. A CEL expression has no type checker here, so this reads
    the text: a comparison it cannot see (through a variable or macro) is not reported."""
    found: list[str] = []
    for match in _EXACT_COMPARISON.finditer(text):
        path = next(g for g in match.group(1, 4, 5) if g).lstrip(".").split(".")
        field = ".".join(("args", *path))
        if field not in found and _free_form_string(input_schema, path):
            found.append(field)
    return found


def _free_form_string(schema: Any, path: list[str]) -> bool:
    node = schema
    for name in path:
        node = _resolved(node, schema)
        properties = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(properties, dict) or name not in properties:
            return False
        node = properties[name]
    node = _resolved(node, schema)
    if not isinstance(node, dict):
        return False
    kinds = node.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    constrained = any(key in node for key in ("enum", "const", "pattern"))
    return "string" in kinds and not constrained


def _resolved(node: Any, root: Any) -> Any:
    for _ in range(32):
        reference = _local_ref(node)
        if reference is None:
            return node
        node = _ref_target(root, reference)
    return node


def _local_ref(node: Any) -> str | None:
    reference = node.get("$ref") if isinstance(node, dict) else None
    return reference if isinstance(reference, str) and reference.startswith("#/") else None


def _ref_target(root: Any, reference: str) -> Any:
    """The schema ``reference`` points to; None (no constraint known) when it points nowhere."""
    try:
        return resolve_local_ref(root, reference)
    except LookupError:
        return None


def tool_matches(pattern: str, canonical: str) -> bool:
    return fnmatch.fnmatchcase(canonical, pattern)
