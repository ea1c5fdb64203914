"""A tool call's arguments: parsed from what the model wrote and checked against the tool's
input schema, with messages that tell the model what to fix."""

from __future__ import annotations

from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from clawpod.sidecar.manifest import ManagedTool

MAX_REPORTED_SCHEMA_ERRORS = 8
MAX_ERROR_TEXT = 300
MAX_REMEMBERED_TEXT = 1024


class CheckedArguments(dict[str, Any]):
    """Arguments that passed ``tool``'s schema. Handing them back to :meth:`ToolExecutor.execute`
    skips a second validation (mediation checks first, for duplicate detection, then executes).
    Treat them as read-only."""

    __slots__ = ("tool",)

    def __init__(self, tool: ManagedTool, arguments: dict[str, Any]) -> None:
        super().__init__(arguments)
        self.tool = tool


def parse_arguments(arguments: str | dict[str, Any] | None) -> dict[str, Any] | str:
    """The arguments as a dict, or a message explaining why they are not a JSON object."""
    if arguments is None:
        return {}
    if isinstance(arguments, dict):
        return arguments
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError as exc:
        return (
            f"arguments are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            "send a single JSON object that matches the tool's input schema"
        )
    if not isinstance(value, dict):
        return f"arguments must be a JSON object, not {json_type(value)}"
    return value


def memoizable(arguments: object) -> bool:
    return isinstance(arguments, str) and len(arguments) <= MAX_REMEMBERED_TEXT


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "null"


def schema_problems(validator: Draft202012Validator, arguments: dict[str, Any]) -> str:
    errors = sorted(validator.iter_errors(arguments), key=error_sort_key)
    if not errors:
        return ""
    shown = [
        f"at {error.json_path}: {cut_text(error.message)}"
        for error in errors[:MAX_REPORTED_SCHEMA_ERRORS]
    ]
    if len(errors) > MAX_REPORTED_SCHEMA_ERRORS:
        shown.append(f"and {len(errors) - MAX_REPORTED_SCHEMA_ERRORS} more")
    return "; ".join(shown)


def error_sort_key(error: ValidationError) -> tuple[str, str]:
    return error.json_path, error.message


def cut_text(text: str, limit: int = MAX_ERROR_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
