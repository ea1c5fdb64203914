"""OpenAPI documents generated for tests: small shapes, and ones written to hurt the importer
(nobody publishes those)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def document(paths: dict[str, Any], schemas: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "hostile", "version": "1"},
        "paths": paths,
        "components": {"schemas": schemas or {}},
    }


def post_with_body(ref: str, operation_id: str = "create") -> dict[str, Any]:
    body = {"content": {"application/json": {"schema": {"$ref": ref}}}, "required": True}
    return {"post": {"operationId": operation_id, "requestBody": body, "responses": _ok()}}


def _ok() -> dict[str, Any]:
    return {"200": {"description": "ok"}}


def ref_chain(length: int, *, cycle: bool) -> dict[str, Any]:
    """S0 -> S1 -> ... -> S(length-1), and back to S0 when ``cycle``."""
    schemas = {}
    for index in range(length):
        target = (index + 1) % length if cycle else index + 1
        properties: dict[str, Any] = {"name": {"type": "string"}}
        if cycle or index + 1 < length:
            properties["next"] = {"$ref": f"#/components/schemas/S{target}"}
        schemas[f"S{index}"] = {"type": "object", "properties": properties}
    return document({"/items": post_with_body("#/components/schemas/S0")}, schemas)


def fan_out(levels: int) -> dict[str, Any]:
    """Each schema uses the next twice: 2**levels copies once inlined."""
    schemas: dict[str, Any] = {f"S{levels}": {"type": "string"}}
    for index in range(levels):
        child = {"$ref": f"#/components/schemas/S{index + 1}"}
        schemas[f"S{index}"] = {"type": "object", "properties": {"a": child, "b": child}}
    return document({"/items": post_with_body("#/components/schemas/S0")}, schemas)


def many_operations(count: int) -> dict[str, Any]:
    paths = {f"/items{index}": {"get": {"responses": _ok()}} for index in range(count)}
    return document(paths)


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


def write_padded(path: Path, size: int) -> Path:
    """A valid small document padded with a description to ``size`` bytes."""
    data = many_operations(1)
    head = json.dumps(data)[:-1] + ', "x-padding": "'
    with path.open("w") as handle:
        handle.write(head)
        remaining = size - len(head) - 2
        chunk = "x" * (1 << 20)
        while remaining > 0:
            handle.write(chunk[: min(remaining, len(chunk))])
            remaining -= len(chunk)
        handle.write('"}')
    return path
