"""Schema normalisation: what both providers accept, and compile errors where that is impossible."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from clawpod.compiler.services.schemas import SchemaProblem, normalise_schema


def normal(schema: dict[str, Any]) -> dict[str, Any]:
    result = normalise_schema(schema)
    Draft202012Validator.check_schema(result)
    assert result["type"] == "object"
    assert not {"anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions"} & set(result)
    return result


def problem(schema: dict[str, Any]) -> SchemaProblem:
    with pytest.raises(SchemaProblem) as caught:
        normalise_schema(schema)
    return caught.value


def test_plain_object_gets_properties_and_is_otherwise_unchanged() -> None:
    assert normal({"type": "object"}) == {"type": "object", "properties": {}}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert normal(schema) == schema


def test_local_refs_are_inlined_recursively_and_defs_dropped() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "order": {"$ref": "#/$defs/order"},
            "tags": {"items": {"$ref": "#/definitions/tag"}},
        },
        "$defs": {
            "order": {"type": "object", "properties": {"side": {"$ref": "#/$defs/side"}}},
            "side": {"enum": ["buy", "sell"]},
        },
        "definitions": {"tag": {"type": "string"}},
    }
    assert normal(schema) == {
        "type": "object",
        "properties": {
            "order": {"type": "object", "properties": {"side": {"enum": ["buy", "sell"]}}},
            "tags": {"items": {"type": "string"}},
        },
    }


def test_ref_with_sibling_keywords_keeps_both_constraints() -> None:
    schema = {
        "type": "object",
        "$defs": {"s": {"type": "string"}},
        "properties": {"a": {"$ref": "#/$defs/s", "maxLength": 3}},
    }
    assert normal(schema)["properties"]["a"] == {"maxLength": 3, "allOf": [{"type": "string"}]}


def test_top_level_ref_is_resolved() -> None:
    schema = {
        "$ref": "#/$defs/args",
        "$defs": {"args": {"type": "object", "properties": {"q": {}}}},
    }
    assert normal(schema) == {"type": "object", "properties": {"q": {}}}


def test_top_level_allof_of_objects_is_merged() -> None:
    schema = {
        "type": "object",
        "allOf": [
            {"properties": {"a": {"type": "string"}}, "required": ["a"]},
            {
                "type": "object",
                "properties": {"b": {"type": "integer"}, "a": {"maxLength": 4}},
                "required": ["b", "a"],
            },
        ],
    }
    assert normal(schema) == {
        "type": "object",
        "properties": {
            "a": {"allOf": [{"type": "string"}, {"maxLength": 4}]},
            "b": {"type": "integer"},
        },
        "required": ["a", "b"],
    }


def test_single_branch_anyof_and_oneof_are_unwrapped() -> None:
    for key in ("anyOf", "oneOf"):
        schema = {"type": "object", key: [{"properties": {"a": {}}, "required": ["a"]}]}
        assert normal(schema) == {"type": "object", "properties": {"a": {}}, "required": ["a"]}


def test_nested_combinators_are_left_alone() -> None:
    schema = {
        "type": "object",
        "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
    }
    assert normal(schema) == schema


@pytest.mark.parametrize(
    ("schema", "where", "reason"),
    [
        (
            {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
            "/oneOf",
            "several alternatives",
        ),
        ({"type": "object", "properties": {"n": {"$ref": "#"}}}, "/properties/n", "recursive"),
        (
            {"type": "object", "properties": {"n": {"$ref": "https://example.com/s.json"}}},
            "/properties/n",
            "not local",
        ),
        (
            {"type": "object", "properties": {"n": {"$ref": "#/$defs/missing"}}},
            "/properties/n",
            "points to nothing",
        ),
        ({"type": "object", "enum": [{}]}, "/enum", "top-level 'enum'"),
        ({"type": "object", "not": {"required": ["a"]}}, "/not", "top-level 'not'"),
        ({"type": "object", "allOf": [{"type": "string"}]}, "/allOf/0", "must be of type 'object'"),
        (
            {
                "type": "object",
                "allOf": [{"properties": {"a": {}}, "patternProperties": {"x": {}}}],
            },
            "/allOf/0",
            "patternProperties",
        ),
        (
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {"a": {}},
                "allOf": [{"properties": {"b": {}}}],
            },
            "",
            "additionalProperties",
        ),
    ],
)
def test_impossible_rewrites_are_problems_with_a_location(
    schema: dict, where: str, reason: str
) -> None:
    caught = problem(schema)
    assert caught.where == where
    assert reason in caught.reason


def test_input_is_not_modified() -> None:
    schema = {
        "type": "object",
        "$defs": {"s": {"type": "string"}},
        "properties": {"a": {"$ref": "#/$defs/s"}},
    }
    before = repr(schema)
    normalise_schema(schema)
    assert repr(schema) == before
