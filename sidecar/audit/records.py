"""The one shape of an audit record for a client request, mediated, passed through or MCP."""

from __future__ import annotations

from typing import Any


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
