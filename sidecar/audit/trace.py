"""One ``tool_trace`` call entry, built the same way in mediated mode and over MCP."""

from __future__ import annotations

from typing import Any

import orjson

from sidecar.execution.outcome import ToolOutcome
from sidecar.manifest import ManagedTool

# Invalid argument text from a model is kept for the operator, but not without bound.
MAX_RAW_ARGUMENTS = 16 * 1024


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
    """Arguments as a JSON value when they parse; otherwise the raw text the model sent."""
    if not isinstance(arguments, str):
        return arguments
    if not arguments.strip():
        return {}
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        if len(arguments) > MAX_RAW_ARGUMENTS:
            return arguments[:MAX_RAW_ARGUMENTS] + f"... ({len(arguments)} characters)"
        return arguments
