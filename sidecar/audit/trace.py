"""One ``tool_trace`` call entry, built the same way in mediated mode and over MCP."""

from __future__ import annotations

from typing import Any

import orjson

from ..manifest import ManagedTool
from ..model.outcome import ToolOutcome

# Arguments are kept for the operator, but a runaway model must not bloat the log.
MAX_ARGUMENT_BYTES = 64 * 1024


def trace_call(
    call_id: str,
    tool: ManagedTool | None,
    presented: str,
    arguments: Any,
    outcome: ToolOutcome,
) -> dict[str, Any]:
    return {
        "id": call_id,
        "name": tool.name if tool is not None else None,
        "presented": presented,
        "arguments": _readable(arguments),
        "executed": outcome.executed,
        "status": outcome.status,
        "error_code": outcome.error_code,
        "latency_ms": round(outcome.latency_ms, 3),
        "truncated": outcome.truncated,
        "original_bytes": outcome.original_bytes,
    }


def _readable(arguments: Any) -> Any:
    """Arguments as a JSON value when they parse, else the raw text the model sent; either is
    replaced by a cut JSON text when it exceeds MAX_ARGUMENT_BYTES."""
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return _bounded(arguments)
    try:
        text = orjson.dumps(arguments)
    except TypeError:
        return arguments  # not JSON-native (huge integers); the log stores it as text
    if len(text) <= MAX_ARGUMENT_BYTES:
        return arguments
    return _bounded(text.decode())


def _bounded(text: str) -> str:
    if len(text.encode()) <= MAX_ARGUMENT_BYTES:
        return text
    cut = text.encode()[:MAX_ARGUMENT_BYTES].decode("utf-8", "ignore")
    return f"{cut}... (cut, {len(text.encode())} bytes)"
