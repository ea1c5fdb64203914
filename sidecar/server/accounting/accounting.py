"""The end of every client request: one audit record, one metrics sample, one log line.

A mediated request's record also carries its rounds, the cost of each of its model calls
(:class:`ModelCharges`) and what it resumed (:func:`record_mediated`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...audit.log import request_record, trace_call, usage_record
from ...codecs.base import Codec
from ...codecs.usage import StreamUsage
from ...mediation.engine import MediationEngine
from ...model.taint import TAINTED_ARGUMENT
from ...model.token_estimate import reply_tokens, request_tokens
from ...model.tool_search import SEARCH_TOOL
from ...model.usage import cost_usd
from ...observability import tracing
from ...observability.logs import log_request_fields, rfc3339_now
from .budget_gate import spend_budget

if TYPE_CHECKING:
    from ..request.exchange import RequestContext

log = logging.getLogger(__name__)

# The metric label of a runner-owned call in a refused mixed round: names runners choose never
# become label values.
RUNNER_TOOL_LABEL = "(runner)"


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
    agent_id = ctx.caller.agent.agent.id
    mode = ctx.caller.agent.agent.mode
    usage = usage or usage_record()
    metrics = ctx.state.metrics
    metrics.count_request(agent_id, ctx.caller.route, http_status)
    if cost is None:
        cost = call_cost(ctx, ctx.ledger.provider_name, ctx.ledger.model, usage)
    if cost and ctx.ledger.provider_name is not None:
        metrics.count_cost(agent_id, ctx.ledger.provider_name, cost)
    if ctx.caller.budgeted:
        hold, ctx.ledger.reserved = (
            ctx.ledger.reserved,
            None,
        )  # released with the spending, in one step
        await spend_budget(ctx.state, agent_id, usage, cost, hold, ctx.caller.end_user)
    stamp = rfc3339_now()  # one timestamp for the log line and the audit record
    log_request_fields(
        stamp,
        {
            "request_id": ctx.caller.request_id,
            "agent": agent_id,
            "route": ctx.caller.route,
            "mode": mode,
            "model": ctx.ledger.model,
            "provider": ctx.ledger.provider_name,
            "status": http_status,
            "code": error_code,
            "stream": ctx.routing.stream,
            "input_tokens": usage.get("input_tokens", 0),
            "output_tokens": usage.get("output_tokens", 0),
            "rounds": usage.get("rounds", 0),
            "duration_ms": round((time.monotonic() - ctx.caller.started) * 1000, 3),
        },
    )
    entry = request_record(
        record_id=ctx.caller.request_id,
        time=stamp,
        route=ctx.caller.route,
        mode=mode,
        model=ctx.ledger.model,
        provider=ctx.ledger.provider_name,
        error_code=error_code,
        http_status=http_status,
        stream=ctx.routing.stream,
        usage=usage,
        tool_trace=tool_trace,
        trace_id=None if tracing.tracer is None else tracing.current_trace_id(),
        end_user=ctx.caller.end_user,
        auth=ctx.caller.auth,
    )
    if cost is not None:
        entry["cost_usd"] = round(cost, 9)
    if ctx.ledger.attempts:  # recorded when there was a choice: a route, a key pool (failover.py)
        entry["providers"] = ctx.ledger.attempts
    if ctx.ledger.audit_extra:
        entry |= ctx.ledger.audit_extra
    if extra:
        entry |= extra
    if ctx.ledger.objects:
        entry["objects"] = ctx.ledger.objects  # stored objects used, made or refused, by id
    try:
        ctx.state.audit.append_now(agent_id, entry)
    except Exception:
        # The client already has its answer; losing the record must be loud, not fatal.
        log.exception(
            "audit append failed for request %s of agent %s", ctx.caller.request_id, agent_id
        )


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


# A model call of a stream: provider, model, its usage.
Call = tuple[str | None, str | None, dict[str, int]]


def with_spent(usage: dict[str, int], spent: list[Call]) -> dict[str, int]:
    """A stream's usage with that of the streams it continued (each a model call)."""
    total = dict(usage)
    for _, _, earlier in spent:
        for name, count in earlier.items():
            if name == "estimated":
                total[name] = True  # part of it is an estimate
            else:
                total[name] = total.get(name, 0) + count
    return total


def calls_cost(ctx: RequestContext, usage: dict[str, int], spent: list[Call]) -> float | None:
    """A continued stream's cost, each call at its own provider's price; None: one call."""
    if not spent:
        return None
    calls = [*spent, (ctx.ledger.provider_name, ctx.ledger.model, usage)]
    costs = [call_cost(ctx, provider, model, used) for provider, model, used in calls]
    known = [cost for cost in costs if cost is not None]
    return sum(known) if known else None


async def report_state_write_failure(ctx: RequestContext, exc: Exception, store: str) -> None:
    """Logged, counted and audited; the finished answer still goes out (issue 14.5)."""
    log.warning("request %s: %s", ctx.caller.request_id, exc)
    ctx.state.metrics.state_write_failures.labels(store=store).inc()
    record = {"event": "state_write_failed", "request": ctx.caller.request_id, "error": str(exc)}
    try:
        await ctx.state.audit.append(ctx.caller.agent.agent.id, {**record, "store": store})
    except Exception:
        log.exception("audit of a failed state write of %s failed", ctx.caller.request_id)


@dataclass(slots=True)
class ModelCharges:
    """The model calls of one mediated request, each at the price of the provider that
    answered it; a provider that reported no usage is charged an estimate (#32)."""

    cost: float | None = None
    estimated: tuple[int, int] = (0, 0)
    """Input and output tokens of the calls whose provider counted none."""

    def charge(
        self, ctx: RequestContext, codec: Codec, request: dict[str, Any], reply: dict[str, Any]
    ) -> None:
        usage = reply.get("usage")
        read, creation = codec.cache_counts(usage)
        tokens = codec.usage_counts(usage)
        if not any(tokens):
            tokens = (request_tokens(request, codec.name), reply_tokens(reply, codec.name))
            self.estimated = (self.estimated[0] + tokens[0], self.estimated[1] + tokens[1])
        call = usage_record(*tokens, cache_read=read, cache_creation=creation)
        cost = call_cost(ctx, ctx.ledger.provider_name, ctx.ledger.model, call)
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost


async def record_mediated(
    ctx: RequestContext,
    engine: MediationEngine,
    charges: ModelCharges,
    replayed_calls: set[str],
    resumed_from: str | None,
    outcome: tuple[int, str | None],
) -> None:
    """The mediated request's metrics and its one audit record; ``outcome``: its HTTP status
    and error code."""
    metrics = ctx.state.metrics
    metrics.rounds.observe(len(engine.rounds))
    for answered in (a for calls in engine.rounds for a in calls):
        label = answered.tool.name if answered.tool else RUNNER_TOOL_LABEL
        if answered.tool is None and answered.call.name == engine.search_name:
            label = SEARCH_TOOL  # the sidecar's own search (SPEC §23), not a runner's tool
        metrics.count_tool_call(label, answered.outcome)
    cache_read, cache_creation = engine.codec.cache_counts(engine.usage.fields)
    usage = usage_record(
        engine.usage.input_tokens + charges.estimated[0],
        engine.usage.output_tokens + charges.estimated[1],
        engine.executed_rounds,
        cache_read=cache_read,
        cache_creation=cache_creation,
    )
    if any(charges.estimated):
        usage["estimated"] = True
    extra: dict[str, Any] = {"hidden_rounds_restored": engine.restored_rounds}
    if resumed_from:
        extra["resumed_from"] = resumed_from
    if engine.taint.tainted:
        extra["taint_sources"] = list(engine.taint.sources)
    if engine.offered:  # SPEC §23: an agent with deferred tools is offered a few per round
        extra["tools_offered"] = engine.offered
    if engine.refused_answers:  # SPEC §16: answers naming nothing asked here
        extra["approval_answers_refused"] = [a.approval_id[:100] for a in engine.refused_answers]
    try:
        await record_request(
            ctx,
            http_status=outcome[0],
            error_code=outcome[1],
            usage=usage,
            tool_trace=scrubbed(ctx, engine, _tool_trace(engine, replayed_calls)),
            extra=extra,
            cost=charges.cost,
        )
    except Exception:
        log.exception("audit of mediated request %s failed", ctx.caller.request_id)


def scrubbed(ctx: RequestContext, engine: MediationEngine, value: Any) -> Any:
    """What is kept of the request, without the credentials or tokens a call of it was
    refused for carrying (SPEC §17): the model sent them, the sidecar does not store them."""
    guard = ctx.state.governed.argument_guard
    refused = any(
        answered.outcome.error_code == TAINTED_ARGUMENT
        for calls in engine.rounds
        for answered in calls
    )
    return guard.scrubbed(value) if guard is not None and refused else value


def _tool_trace(engine: MediationEngine, replayed: set[str]) -> list[dict[str, Any]]:
    """The audit record's rounds: every call answered, rendered as MCP calls are. A call whose
    answer came from the journal of an earlier attempt is ``replayed``, not executed again (its
    latency is that attempt's)."""
    return [
        {
            "round": number,
            "calls": [
                _replayed(trace_call(a.call.id, a.tool, a.call.name, a.call.arguments, a.outcome))
                if a.call.id in replayed
                else trace_call(a.call.id, a.tool, a.call.name, a.call.arguments, a.outcome)
                for a in calls
            ],
        }
        for number, calls in enumerate(engine.rounds, 1)
    ]


def _replayed(call: dict[str, Any]) -> dict[str, Any]:
    return call | {"executed": False, "replayed": True, "latency_ms": 0.0}


def stream_usage(ctx: RequestContext, usage: StreamUsage, complete: bool) -> dict[str, int]:
    """A passing stream's usage as its provider counted it, or an estimate where it counted
    none. A stream cut before its end may carry only early counts (Anthropic's first event
    counts the input and a few output tokens): its output is at least what its model wrote."""
    counted = usage_record(
        usage.input_tokens,
        usage.output_tokens,
        rounds=1,
        cache_read=usage.cache_read,
        cache_creation=usage.cache_creation,
    )
    if complete and (usage.input_tokens or usage.output_tokens):
        return counted
    written = usage.written_tokens()
    if usage.input_tokens and usage.output_tokens >= written:
        return counted
    if not usage.input_tokens:
        return estimated_usage(ctx, max(written, usage.output_tokens))
    counted["output_tokens"] = written
    counted["estimated"] = True
    return counted


def estimated_usage(ctx: RequestContext, output_tokens: int) -> dict[str, int]:
    """Usage of an answer the provider did not count: the request's size in tokens and the
    answer's estimate, marked so the audit tells it from a provider's count (#32)."""
    usage = usage_record(ctx.input_estimate(), output_tokens, rounds=1)
    usage["estimated"] = True
    return usage
