"""Where daily budgets meet LLM requests: an estimate is held while a request runs, a spent
budget refuses up front, and what the request really spent is charged at the end."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...governance.budgets import seconds_to_next_day
from ...manifest import Rate
from ...model.end_user import EndUser
from ...model.errors import ApiError
from ...model.usage import TOKENS_PER_PRICE_UNIT, UNKNOWN_MAX_OUTPUT, max_output_of
from ...state.counters import (
    SHARED_LIMITS_UNAVAILABLE,
    Refused,
    SharedLimitsUnavailable,
    user_subject,
)
from ..providers.key_pool import retry_after_header

if TYPE_CHECKING:
    from ...state.counters import Hold
    from ..providers.upstream import Target
    from ..request.context import SidecarState
    from ..request.exchange import RequestContext

if TYPE_CHECKING:
    from ..providers.upstream import Target
    from ..request.context import SidecarState
    from ..request.exchange import RequestContext

# The fields that cap a request's output in the three protocols.
_OUTPUT_CAPS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def budget_spent(for_end_user: bool = False) -> ApiError:
    """429 that SDKs must not retry (they would only be refused again) until the day ends."""
    whose = "this agent's or its end user's" if for_end_user else "this agent's"
    return ApiError(
        429,
        "budget_exhausted",
        f"{whose} budget for today is spent; it renews at midnight UTC",
        "rate_limit_error",
        headers={
            "x-should-retry": "false",
            "retry-after": retry_after_header(seconds_to_next_day()),
        },
    )


def group_rate_spent() -> ApiError:
    """429 the SDKs may retry: a group's rate for this minute is spent (SPEC §24)."""
    return ApiError(
        429,
        "group_rate_exceeded",
        "the requests or tokens per minute of this agent's budget group are spent for this "
        "minute; try again in the next one",
        "rate_limit_error",
        headers={
            "x-should-retry": "true",
            "retry-after": retry_after_header(60 - time.time() % 60),
        },
    )


def background_refused() -> ApiError:
    return ApiError(
        400,
        "background_under_budget",
        "background responses are not allowed for an agent with a budget: what they spend "
        "could not be charged; send the request without 'background'",
        headers={"x-should-retry": "false"},
    )


def unpriced(provider: str, model: str) -> ApiError:
    return ApiError(
        400,
        "model_unpriced",
        f"model {model!r} of provider {provider!r} has no price, and this agent's budget is in "
        "USD: what it spends could not be charged. The pod's operator prices it in the "
        "provider's prices (or a 'default' entry)",
        headers={"x-should-retry": "false"},
    )


def estimate_tokens(input_tokens: int, body: dict[str, Any], max_output: int) -> tuple[int, int]:
    """(input, output) a request may spend: its estimated input, and its output cap or, without
    one, the most its model may write (``max_output``): a request without a cap may write
    that much."""
    for field in _OUTPUT_CAPS:
        cap = body.get(field)
        if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
            return input_tokens, cap
    return input_tokens, max_output


def shared_limits_unavailable() -> ApiError:
    """503 the client may retry: the pod's shared store cannot be reached (fail-closed)."""
    return ApiError(
        503,
        SHARED_LIMITS_UNAVAILABLE,
        "this agent's budget is counted in the pod's shared store, which cannot be reached "
        "now; try again shortly",
        "overloaded_error",
        headers={"x-should-retry": "true", "retry-after": "1"},
    )


def end_user_rate_limited(rate: Rate) -> ApiError:
    """429 the client may retry once the end user's rate allows another request."""
    return ApiError(
        429,
        "end_user_rate_limited",
        f"this end user's requests are limited to {rate.count} per {rate.per}; try again shortly",
        "rate_limit_error",
        headers={"retry-after": retry_after_header(rate.period_s / rate.count)},
    )


async def end_user_rate(state: SidecarState, end_user: EndUser | None) -> ApiError | None:
    """One request from the end user's rate (``end-user-limits.requests``, across the pod's
    agents and the pods sharing the store), or why not."""
    limits = state.budgets.end_user_limits
    if end_user is None or limits is None or limits.requests is None:
        return None
    state.budgets.note_end_user(end_user.subject)
    key = (user_subject(end_user.subject), "requests", 0)
    try:
        taken = await state.budgets.counters.take(key, limits.requests)
    except SharedLimitsUnavailable:
        return shared_limits_unavailable()
    return None if taken else end_user_rate_limited(limits.requests)


async def admit(ctx: RequestContext, body: dict[str, Any]) -> ApiError | None:
    """Hold the request's estimated spending against the agent's budgets, or say why not."""
    budgets = ctx.state.budgets
    agent, end_user = ctx.caller.agent.agent.id, ctx.caller.end_user
    if not budgets.applies(agent, end_user):
        return None
    if body.get("background") is True:
        return background_refused()
    max_output, usd_per_token = UNKNOWN_MAX_OUTPUT, (0.0, 0.0)
    if ctx.routing.targets:
        _, provider, model = ctx.routing.targets[0]
        max_output = provider.max_output_tokens or max_output_of(model) or UNKNOWN_MAX_OUTPUT
        if budgets.counts_usd(agent, end_user):
            refusal, usd_per_token = _priced(ctx, ctx.routing.targets)
            if refusal is not None:
                return refusal
    input_tokens, output_tokens = estimate_tokens(ctx.input_estimate(), body, max_output)
    usd = (input_tokens * usd_per_token[0] + output_tokens * usd_per_token[1]) / (
        TOKENS_PER_PRICE_UNIT
    )
    try:
        hold = await budgets.admit(agent, input_tokens + output_tokens, usd, end_user)
    except SharedLimitsUnavailable:
        return shared_limits_unavailable()
    if isinstance(hold, Refused):
        ctx.state.metrics.budget_refusals.labels(agent=agent).inc()
        if hold.per_minute:
            return group_rate_spent()
        return budget_spent(end_user is not None and budgets.end_user_limits is not None)
    if not hold.shared and ctx.state.config.shared_limits is not None:
        # fail-local: admitted on this sidecar's own counts; the record says so (SPEC §24).
        ctx.ledger.audit_extra = {**(ctx.ledger.audit_extra or {}), "limits": "local"}
    ctx.ledger.reserved = hold
    return None


def _priced(
    ctx: RequestContext, targets: list[Target]
) -> tuple[ApiError | None, tuple[float, float]]:
    """The dearest (input, output) price of the request's targets (any may serve it), or the
    refusal of a target nobody prices: it would be served against a USD budget for $0."""
    dearest = (0.0, 0.0)
    for name, _, model in targets:
        price = ctx.state.prices.price(name, model)
        if price is None:
            return unpriced(name, model), dearest
        dearest = (max(dearest[0], price.input), max(dearest[1], price.output))
    return None, dearest


async def release(ctx: RequestContext) -> None:
    """Give back the request's hold; its real spending was charged by ``spend_budget``."""
    if ctx.ledger.reserved is not None:
        hold, ctx.ledger.reserved = ctx.ledger.reserved, None
        if hold.shared:  # a round trip: a cancelled handler must not leave the hold behind
            await ctx.state.tasks.run(ctx.state.budgets.release(hold))
        else:
            await ctx.state.budgets.release(hold)


async def spend_budget(
    state: SidecarState,
    agent: str,
    usage: dict[str, int],
    cost: float | None,
    hold: Hold | None = None,
    end_user: EndUser | None = None,
) -> None:
    """What a request spent, charged to its agent's budgets; its ``hold`` (if ``release`` did
    not give it back already) released in the same step."""
    budgets = state.budgets
    if not budgets.applies(agent, end_user):
        return
    tokens = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
    usd = cost or 0.0
    settling = budgets.spend(agent, tokens, usd, hold, end_user)
    if hold is not None and hold.shared:  # as ``release``: not left behind by a cancel
        await state.tasks.run(settling)
    else:
        await settling
    claims = budgets.claims.get(agent, ())
    if tokens > 0 and any(claim.tokens is not None for claim in claims):
        state.metrics.budget_tokens.labels(agent=agent).inc(tokens)
    if usd > 0 and any(claim.usd is not None for claim in claims):
        state.metrics.budget_usd.labels(agent=agent).inc(usd)
