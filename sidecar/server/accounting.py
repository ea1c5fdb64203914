"""The end of every client request: one audit record, one metrics sample, one log line."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from clawpod.sidecar.audit.records import request_record, usage_record
from clawpod.sidecar.model.prices import cost_usd
from clawpod.sidecar.observability import tracing
from clawpod.sidecar.observability.logs import log_request, rfc3339_now
from clawpod.sidecar.server.budget_gate import spend_budget

if TYPE_CHECKING:
    from clawpod.sidecar.server.context import RequestContext

log = logging.getLogger(__name__)


async def record_request(
    ctx: RequestContext,
    *,
    http_status: int,
    error_code: str | None = None,
    usage: dict[str, int] | None = None,
    tool_trace: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
    cost: float | None = None,
) -> None:
    """Account for a finished /v1 request (pass-through, mediated or refused before routing).
    Call it exactly once, after the response has been sent, so the audit write does not delay
    the client. ``cost``: what a request of several model calls cost (each at its own
    provider's price); without it, the usage at the price of the provider that answered."""
    agent_id = ctx.agent.agent.id
    mode = ctx.agent.agent.mode
    usage = usage or usage_record()
    metrics = ctx.state.metrics
    metrics.count_request(agent_id, ctx.route, http_status)
    if cost is None:
        cost = call_cost(ctx, ctx.provider_name, ctx.model, usage)
    if cost and ctx.provider_name is not None:
        metrics.count_cost(agent_id, ctx.provider_name, cost)
    spend_budget(ctx.state, agent_id, usage, cost)
    stamp = rfc3339_now()  # one timestamp for the log line and the audit record
    log_request(
        stamp=stamp,
        request_id=ctx.request_id,
        agent=agent_id,
        route=ctx.route,
        mode=mode,
        model=ctx.model,
        provider=ctx.provider_name,
        status=http_status,
        code=error_code,
        stream=ctx.stream,
        input_tokens=usage.get("input_tokens", 0),
        output_tokens=usage.get("output_tokens", 0),
        rounds=usage.get("rounds", 0),
        duration_ms=round((time.monotonic() - ctx.started) * 1000, 3),
    )
    entry = request_record(
        record_id=ctx.request_id,
        time=stamp,
        route=ctx.route,
        mode=mode,
        model=ctx.model,
        provider=ctx.provider_name,
        error_code=error_code,
        http_status=http_status,
        stream=ctx.stream,
        usage=usage,
        tool_trace=tool_trace,
        trace_id=tracing.current_trace_id(),
    )
    if cost is not None:
        entry["cost_usd"] = round(cost, 9)
    if ctx.attempts:  # recorded when there was a choice: a route, a key pool (failover.py)
        entry["providers"] = ctx.attempts
    entry |= (ctx.audit_extra or {}) | (extra or {})
    if ctx.objects:
        entry["objects"] = ctx.objects  # stored objects used, made or refused, by id
    try:
        await ctx.state.audit.append(agent_id, entry)
    except Exception:
        # The client already has its answer; losing the record must be loud, not fatal.
        log.exception("audit append failed for request %s of agent %s", ctx.request_id, agent_id)


def call_cost(
    ctx: RequestContext, provider_name: str | None, model: str | None, usage: dict[str, int]
) -> float | None:
    """USD of one model call's usage at ``provider_name``'s price of ``model``; None when the
    call spent nothing or its price is unknown."""
    if provider_name is None or not (usage.get("input_tokens") or usage.get("output_tokens")):
        return None
    price = ctx.state.prices.price(provider_name, model)
    if price is None:
        return None
    # OpenAI counts cached input inside input_tokens; Anthropic beside it.
    api = ctx.state.config.providers[provider_name].api
    return cost_usd(price, usage, input_includes_cached=api != "anthropic")
