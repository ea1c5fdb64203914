"""A tool call's arguments: parsed from what the model wrote and checked against the tool's
input schema, with messages that tell the model what to fix.

:class:`ArgumentCheck` is the one check of a call: mediated mode (the engine, through the
callable it is given) and MCP run it once per call, and the gate and the executor take the
:class:`CheckedCall` it makes as it is."""

from __future__ import annotations

import time
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from ..manifest import ManagedTool
from ..model.canonical import canonical_json
from ..model.conversation import CheckedCall, ToolOutcome, invalid_arguments

MAX_REPORTED_SCHEMA_ERRORS = 8
MAX_ERROR_TEXT = 300
MAX_REMEMBERED_TEXT = 1024
MAX_REMEMBERED_ARGUMENTS = 1024


class ArgumentCheck:
    """Parse (raw JSON text from the model, or a dict) and validate against the tool's schema.

    A pure function of tool and arguments; the instance only remembers work: each tool's
    compiled validator, and which short argument texts agents repeat (context, quotes) were
    valid, since validation costs more than the rest of a call's preparation. A remembered
    text is parsed again, so every call's arguments are its own objects, whoever made the same
    call before.
    """

    def __init__(self) -> None:
        self._validators: dict[int, tuple[ManagedTool, Draft202012Validator]] = {}
        self._valid_texts: dict[tuple[int, str], tuple[ManagedTool, bytes]] = {}

    def __call__(
        self, tool: ManagedTool, arguments: str | dict[str, Any] | None, call_id: str = ""
    ) -> CheckedCall | ToolOutcome:
        """The checked call, or an ``invalid_arguments`` outcome whose message tells the model
        what to fix."""
        started = time.perf_counter()
        memo_key = (id(tool), arguments) if memoizable(arguments) else None
        parsed = parse_arguments(arguments)
        if isinstance(parsed, str):
            return invalid_arguments(parsed, started)
        known = self._valid_texts.get(memo_key) if memo_key is not None else None
        if known is not None and known[0] is tool:
            return CheckedCall(tool, parsed, known[1], tool.effect, call_id)
        problems = schema_problems(self._validator(tool), parsed)
        if problems:
            return invalid_arguments(
                f"arguments do not match the input schema of {tool.presented}: {problems}", started
            )
        checked = CheckedCall(tool, parsed, canonical_json(parsed), tool.effect, call_id)
        if memo_key is not None:
            self._remember(memo_key, (tool, checked.canonical))
        return checked

    def _remember(self, key: tuple[int, str], known: tuple[ManagedTool, bytes]) -> None:
        if len(self._valid_texts) >= MAX_REMEMBERED_ARGUMENTS:
            self._valid_texts.pop(next(iter(self._valid_texts)))
        self._valid_texts[key] = known

    def _validator(self, tool: ManagedTool) -> Draft202012Validator:
        compiled = self._validators.get(id(tool))
        if compiled is None or compiled[0] is not tool:
            validator = Draft202012Validator(
                tool.input_schema, format_checker=Draft202012Validator.FORMAT_CHECKER
            )
            compiled = (tool, validator)
            self._validators[id(tool)] = compiled
        return compiled[1]


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
