"""Normalise tool input schemas so that both OpenAI and Anthropic accept them.

Both providers want a plain object schema at the top: no ``$ref`` they would have to resolve,
no top-level ``anyOf``/``oneOf``/``allOf``/``enum``/``not``. Local references are inlined, a
top-level ``allOf`` of object schemas is merged, a one-branch ``anyOf``/``oneOf`` is unwrapped;
anything that cannot be rewritten without changing its meaning is an error.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from ...sidecar.model.schema_refs import ref_parts, resolve_local_ref
from ..errors import pointer

# Keywords whose value is a schema, a list of schemas, or a map of name -> schema.
_SCHEMA_VALUED = (
    "additionalProperties",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")
_DEFINITIONS = ("$defs", "definitions")
_DROPPED_AT_TOP = ("$schema", "$id", "$comment")
_FORBIDDEN_AT_TOP = ("enum", "const", "not", "if", "then", "else")
_MERGEABLE = {
    "type",
    "properties",
    "required",
    "description",
    "title",
    "additionalProperties",
    "$comment",
}


class SchemaProblem(Exception):
    """A schema that cannot be normalised; ``where`` is a JSON pointer inside the schema."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(reason)
        self.where = where
        self.reason = reason


def _children(schema: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    for key in _SCHEMA_VALUED:
        if key in schema:
            yield (key,), schema[key]
    for key in _SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for index, item in enumerate(schema[key]):
                yield (key, index), item
    for key in _SCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for name, item in schema[key].items():
                yield (key, name), item


def _has_refs(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    if "$ref" in schema or "$dynamicRef" in schema:
        return True
    return any(_has_refs(child) for _, child in _children(schema))


def _resolve(root: dict[str, Any], ref: str, where: str) -> Any:
    if not ref.startswith("#"):
        raise SchemaProblem(
            where, f"$ref {ref!r} is not local; only '#/...' references can be inlined"
        )
    try:
        return resolve_local_ref(root, ref)
    except LookupError as exc:
        raise SchemaProblem(where, str(exc)) from None


def _inline(
    root: dict[str, Any], schema: Any, path: tuple[str | int, ...], active: tuple[str, ...]
) -> Any:
    if not isinstance(schema, dict):
        return schema
    where = pointer(*path)
    if "$dynamicRef" in schema or "$recursiveRef" in schema:
        raise SchemaProblem(where, "$dynamicRef/$recursiveRef cannot be inlined")
    result = {k: v for k, v in schema.items() if k not in _DEFINITIONS}
    for child_path, child in _children(schema):
        if child_path[0] in _DEFINITIONS:
            continue
        inlined = _inline(root, child, (*path, *child_path), active)
        if len(child_path) == 1:
            result[child_path[0]] = inlined
        else:
            container = result[child_path[0]]
            if container is schema[child_path[0]]:
                container = result[child_path[0]] = copy.copy(container)
            container[child_path[1]] = inlined
    ref = result.pop("$ref", None)
    if ref is None:
        return result
    if not isinstance(ref, str):
        raise SchemaProblem(where, "$ref must be a string")
    if ref in active:
        raise SchemaProblem(where, f"$ref {ref!r} is recursive and cannot be inlined")
    target = _resolve(root, ref, where)
    target = _inline(root, target, tuple(ref_parts(ref)), (*active, ref))
    if not result:
        return copy.deepcopy(target)
    # 2020-12 lets $ref sit beside other keywords: both apply, which allOf expresses.
    result["allOf"] = [copy.deepcopy(target), *result.get("allOf", [])]
    return result


def _merge_all_of(schema: dict[str, Any]) -> dict[str, Any]:
    branches = schema.pop("allOf")
    parts = [schema, *branches]
    for index, part in enumerate(parts):
        where = pointer("allOf", index - 1) if index else ""
        if not isinstance(part, dict):
            raise SchemaProblem(where, "allOf branch must be an object schema")
        extra = sorted(set(part) - _MERGEABLE)
        if index and extra:
            raise SchemaProblem(
                where,
                f"top-level allOf branch uses {', '.join(extra)}; only object branches "
                "(type, properties, required) can be merged",
            )
        if part.get("type", "object") != "object":
            raise SchemaProblem(where, "top-level allOf branch must be of type 'object'")
    closed = [p for p in parts if p.get("additionalProperties", True) is not True]
    with_properties = [p for p in parts if p.get("properties")]
    if closed and len(with_properties) > 1:
        raise SchemaProblem(
            "", "top-level allOf mixes additionalProperties with properties from several branches"
        )
    merged = dict(schema)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for part in parts:
        for name, value in (part.get("properties") or {}).items():
            if name in properties and properties[name] != value:
                properties[name] = {"allOf": [properties[name], value]}
            else:
                properties[name] = value
        required += [n for n in part.get("required", []) if n not in required]
    merged["properties"] = properties
    if required:
        merged["required"] = required
    if closed:
        merged["additionalProperties"] = closed[0]["additionalProperties"]
    return merged


def _rewrite_top(schema: dict[str, Any]) -> dict[str, Any]:
    for key in _DROPPED_AT_TOP:
        schema.pop(key, None)
    for key in ("anyOf", "oneOf"):
        if key not in schema:
            continue
        branches = schema.pop(key)
        if not isinstance(branches, list) or len(branches) != 1:
            raise SchemaProblem(
                pointer(key),
                f"top-level {key} with several alternatives is refused by OpenAI and cannot be "
                "rewritten; move the alternatives into a property",
            )
        schema["allOf"] = [*schema.get("allOf", []), branches[0]]
    if "allOf" in schema:
        schema = _merge_all_of(schema)
    for key in _FORBIDDEN_AT_TOP:
        if key in schema:
            raise SchemaProblem(pointer(key), f"top-level '{key}' is refused by the providers")
    schema.setdefault("properties", {})
    return schema


def normalise_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Return a provider-safe copy of ``schema``; raise :class:`SchemaProblem` if impossible."""
    result = _inline(schema, schema, (), ()) if _has_refs(schema) else copy.deepcopy(schema)
    result = {k: v for k, v in result.items() if k not in _DEFINITIONS}
    return _rewrite_top(result)


def schema_key(schema: dict[str, Any]) -> str:
    """Canonical text of a schema, used to check each distinct schema only once."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))
