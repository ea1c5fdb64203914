"""The end of every client request: one audit record, one metrics sample, one log line."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from sidecar.observability.logs import log_request

if TYPE_CHECKING:
    from prometheus_client import Counter

    from sidecar.manifest import AgentBuild
    from sidecar.server.context import RequestContext, SidecarState

log = logging.getLogger("sidecar.server")


def usage_record(input_tokens: int = 0, output_tokens: int = 0, rounds: int = 0) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "rounds": rounds}


async def record_request(
    ctx: RequestContext,
    *,
    http_status: int,
    error_code: str | None = None,
    usage: dict[str, int] | None = None,
    tool_trace: list[dict[str, Any]] | None = None,
) -> None:
    """Account for a finished /v1 request (pass-through or mediated). Call it exactly once,
    after the response has been sent, so the audit write does not delay the client."""
    await record(
        ctx.state,
        ctx.agent,
        route=ctx.route,
        request_id=ctx.request_id,
        started=ctx.started,
        http_status=http_status,
        error_code=error_code,
        model=ctx.model,
        provider=ctx.provider_name,
        stream=ctx.stream,
        usage=usage,
        tool_trace=tool_trace,
    )


async def record(
    state: SidecarState,
    agent: AgentBuild,
    *,
    route: str,
    request_id: str,
    started: float,
    http_status: int,
    error_code: str | None,
    model: str | None,
    provider: str | None,
    stream: bool,
    usage: dict[str, int] | None = None,
    tool_trace: list[dict[str, Any]] | None = None,
) -> None:
    """Like :func:`record_request` for requests that failed before they were routed."""
    agent_id = agent.agent.id
    mode = agent.agent.mode
    usage = usage or usage_record()
    status = "ok" if error_code is None else "error"
    _request_counter(state, agent_id, route, http_status).inc()
    log_request(
        request_id=request_id,
        agent=agent_id,
        route=route,
        mode=mode,
        model=model,
        provider=provider,
        status=http_status,
        code=error_code,
        stream=stream,
        input_tokens=usage.get("input_tokens", 0),
        output_tokens=usage.get("output_tokens", 0),
        rounds=usage.get("rounds", 0),
        duration_ms=round((time.monotonic() - started) * 1000, 3),
    )
    entry = {
        "id": request_id,
        "route": route,
        "mode": mode,
        "model": model,
        "provider": provider,
        "outcome": {"status": status, "code": error_code},
        "http_status": http_status,
        "stream": stream,
        "usage": usage,
        "tool_trace": tool_trace or [],
    }
    try:
        await state.audit.append(agent_id, entry)
    except Exception:
        # The client already has its answer; losing the record must be loud, not fatal.
        log.exception("audit append failed for request %s of agent %s", request_id, agent_id)


def _request_counter(state: SidecarState, agent: str, route: str, status: int) -> Counter:
    key = ("requests", agent, route, status)
    child = state.counters.get(key)
    if child is None:
        child = state.metrics.requests.labels(agent=agent, route=route, status=str(status))
        state.counters[key] = child
    return child
