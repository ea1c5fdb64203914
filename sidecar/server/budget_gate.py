"""Where token budgets meet LLM requests: refused up front once spent, charged at the end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clawpod.sidecar.model.errors import ApiError

if TYPE_CHECKING:
    from clawpod.sidecar.server.context import RequestContext, SidecarState

BUDGET_SPENT = ApiError(
    429,
    "budget_exhausted",
    "this agent's token budget for today is spent; it renews at midnight UTC",
    "rate_limit_error",
)


def within_budget(ctx: RequestContext) -> bool:
    agent = ctx.agent.agent.id
    remaining = ctx.state.budgets.remaining(agent)
    if remaining is None or remaining > 0:
        return True
    ctx.state.metrics.budget_refusals.labels(agent=agent).inc()
    return False


def spend_budget(state: SidecarState, agent: str, usage: dict[str, int]) -> None:
    tokens = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
    if tokens > 0 and agent in state.budgets.limits:
        state.budgets.spend(agent, tokens)
        state.metrics.budget_tokens.labels(agent=agent).inc(tokens)
