"""The one shape of an audit record for a client request, mediated, passed through or MCP:
the request, its usage, and each tool call of its ``tool_trace``."""

from __future__ import annotations

from typing import Any

import orjson

from ..manifest import ManagedTool
from ..model.outcome import ToolOutcome

# Arguments are kept for the operator, but a runaway model must not bloat the log.
MAX_ARGUMENT_BYTES = 64 * 1024


def usage_record(
    input_tokens: int = 0,
    output_tokens: int = 0,
    rounds: int = 0,
    *,
    cache_read: int = 0,
    cache_creation: int = 0,
) -> dict[str, int]:
    """Token usage of a request; cached input (read from, or written to, the provider's prompt
    cache) appears when there was any."""
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens, "rounds": rounds}
    if cache_read:
        usage["cache_read_input_tokens"] = cache_read
    if cache_creation:
        usage["cache_creation_input_tokens"] = cache_creation
    return usage


def request_record(
    *,
    record_id: str,
    route: str,
    mode: str,
    http_status: int,
    stream: bool,
    error_code: str | None = None,
    model: str | None = None,
    provider: str | None = None,
    usage: dict[str, int] | None = None,
    tool_trace: list[dict[str, Any]] | None = None,
    time: str | None = None,
    trace_id: str | None = None,
) -> dict[str, Any]:
    """A request's record before the log chains it (the log adds agent, prev and hash, and the
    time when none is given)."""
    record: dict[str, Any] = {
        "id": record_id,
        "time": time,
        "route": route,
        "mode": mode,
        "model": model,
        "provider": provider,
        "outcome": {"status": "ok" if error_code is None else "error", "code": error_code},
        "http_status": http_status,
        "stream": stream,
        "usage": usage or usage_record(),
        "tool_trace": tool_trace or [],
    }
    if time is None:
        del record["time"]  # the log sets it
    if trace_id is not None:
        record["trace_id"] = trace_id  # the OpenTelemetry trace this request belongs to
    return record


def trace_call(
    call_id: str,
    tool: ManagedTool | None,
    presented: str,
    arguments: Any,
    outcome: ToolOutcome,
) -> dict[str, Any]:
    """One call entry of ``tool_trace``, built the same way in mediated mode and over MCP."""
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
