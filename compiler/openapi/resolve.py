"""An operation's schemas as tool input: local ``$ref``s inlined, within bounds, and OpenAPI's
schema dialect (3.0's ``nullable``, boolean ``exclusiveMinimum``, Swagger's ``x-nullable``)
rewritten as JSON Schema 2020-12.

Every ref is followed at most :data:`MAX_DEPTH` deep and every inlined schema holds at most
:data:`MAX_NODES` nodes, so a document whose refs fan out (each schema using the next twice,
thirty deep) costs a bounded walk instead of 2**30 copies. A cycle, a remote ref or a bound
crossed is :class:`Unsupported`: the operation is skipped with that reason, never guessed at.
"""

from __future__ import annotations

from typing import Any

from ...sidecar.model.schema_refs import resolve_local_ref

MAX_DEPTH = 64
MAX_NODES = 20_000
MAX_NESTING = 200  # levels of one inlined schema (under Python's recursion limit)
# OpenAPI keywords with no meaning to a JSON Schema validator or a model.
_DROPPED = frozenset({"discriminator", "xml", "externalDocs", "example", "nullable"})
_EXCLUSIVE = (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum"))


class Unsupported(Exception):
    """Why an operation cannot become a tool (named in the output, never guessed)."""


class Budget:
    """The nodes one tool's schema may still take."""

    def __init__(self, nodes: int = MAX_NODES) -> None:
        self.left = nodes

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise Unsupported(
                f"its schema is larger than {MAX_NODES:,} nodes once its $refs are inlined"
            )


def inline(root: dict[str, Any], node: Any, budget: Budget, *, legacy: bool) -> Any:
    """``node`` with every ``$ref`` replaced by its target (``legacy``: the 3.0/2.0 dialect)."""
    return _inline(root, node, budget, (), legacy, 0)


def follow(root: dict[str, Any], node: Any) -> Any:
    """A parameter, request body or security scheme that may itself be a ``$ref``."""
    seen: list[str] = []
    while isinstance(node, dict) and "$ref" in node:
        ref = _ref_text(node["$ref"])
        if ref in seen or len(seen) >= MAX_DEPTH:
            raise Unsupported(f"$ref cycle: {' -> '.join([*seen, ref])}")
        seen.append(ref)
        node = _target(root, ref)
    return node


def _ref_text(ref: Any) -> str:
    if not isinstance(ref, str):
        raise Unsupported("a $ref that is not a string")
    if not ref.startswith("#"):
        raise Unsupported(f"$ref {ref!r} points outside the document (only '#/...' is followed)")
    return ref


def _target(root: dict[str, Any], ref: str) -> Any:
    try:
        return resolve_local_ref(root, ref)
    except LookupError as exc:
        raise Unsupported(f"$ref {ref!r}: {exc}") from None


def _inline(
    root: dict[str, Any],
    node: Any,
    budget: Budget,
    active: tuple[str, ...],
    legacy: bool,
    level: int,
) -> Any:
    budget.spend()
    if level > MAX_NESTING:
        raise Unsupported(f"its schema is nested deeper than {MAX_NESTING} levels")
    deeper = level + 1
    if isinstance(node, list):
        return [_inline(root, item, budget, active, legacy, deeper) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref = _ref_text(node["$ref"])
        if ref in active:
            raise Unsupported(f"recursive schema: $ref cycle {' -> '.join([*active, ref])}")
        if len(active) >= MAX_DEPTH:
            raise Unsupported(f"$refs nested deeper than {MAX_DEPTH}")
        target = _inline(root, _target(root, ref), budget, (*active, ref), legacy, deeper)
        siblings = {k: v for k, v in node.items() if k != "$ref" and not k.startswith("x-")}
        if not siblings or legacy:  # 3.0 and 2.0 ignore a $ref's siblings
            return target
        rest = _inline(root, siblings, budget, active, legacy, level)
        return {**rest, "allOf": [target, *rest.get("allOf", [])]}
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-") or (legacy and key in _DROPPED):
            continue
        if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(
            value, dict
        ):
            result[key] = {
                name: _inline(root, item, budget, active, legacy, deeper)
                for name, item in value.items()
            }
        elif key in ("enum", "const", "default", "examples", "required"):
            result[key] = value
        else:
            result[key] = _inline(root, value, budget, active, legacy, deeper)
    return _modernise(result, node) if legacy else result


def _modernise(schema: dict[str, Any], original: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0 / Swagger 2.0 schema keywords as JSON Schema 2020-12 says them."""
    for exclusive, bound in _EXCLUSIVE:
        flag = schema.get(exclusive)
        if isinstance(flag, bool):
            del schema[exclusive]
            if flag and bound in schema:
                schema[exclusive] = schema.pop(bound)
    if original.get("nullable") is True or original.get("x-nullable") is True:
        kind = schema.get("type")
        if isinstance(kind, str):
            schema["type"] = [kind, "null"]
        elif "enum" in schema and None not in schema["enum"]:
            schema["enum"] = [*schema["enum"], None]
    if original.get("example") is not None and "examples" not in schema:
        schema["examples"] = [original["example"]]
    return schema
