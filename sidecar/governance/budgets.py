"""Daily budgets (SPEC §9.2, §14, §24): ``x-claw.budgets: {<agent or *>: {tokens-per-day: N,
usd-per-day: X}}`` and ``x-claw.budget-groups: {NAME: {agents: [...], tokens-per-day: N,
usd-per-day: X}}``.

Each agent with a budget (its own, else ``*``'s) may spend N tokens (input + output, as the
sidecar accounts every request) and X USD (at the pod's prices) per UTC day; a group's agents
together (with the same group's agents in every pod sharing the store) may spend the group's.
Once any budget of an agent is spent, its LLM requests are refused with 429 until the day ends.
A request already running finishes. Each running request holds an estimate of what it will
spend (``admit``), so parallel requests cannot all start on the same remainder. The counts are
the store's (``state/counters.py``: this sidecar's state directory, or the shared store).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from ..manifest import Governance
from ..state.budgets import utc_day
from ..state.counters import Claim, Counters, Hold, LocalCounters, Refused, group_subject

EVERY_AGENT = "*"
T = TypeVar("T", int, float)


def seconds_to_next_day() -> float:
    """Until midnight UTC, when every budget renews."""
    now = datetime.datetime.now(datetime.UTC)
    tomorrow = datetime.datetime.combine(now.date(), datetime.time(), datetime.UTC)
    return (tomorrow + datetime.timedelta(days=1) - now).total_seconds()


def _limits_of(budgets: dict[str, T], agents: Iterable[str]) -> dict[str, T]:
    return {
        agent: budgets[agent] if agent in budgets else budgets[EVERY_AGENT]
        for agent in agents
        if agent in budgets or EVERY_AGENT in budgets
    }


def budget_claims(governance: Governance | None, agents: Iterable[str]) -> dict[str, list[Claim]]:
    """Each governed agent's budgets: its own, then each group's it belongs to."""
    agents = list(agents)
    tokens = _limits_of(governance.budgets if governance else {}, agents)
    usd = _limits_of((governance.usd_budgets if governance else None) or {}, agents)
    claims: dict[str, list[Claim]] = {}
    for agent in agents:
        if agent in tokens or agent in usd:
            claims[agent] = [Claim(agent, tokens.get(agent), usd.get(agent))]
    groups = (governance.budget_groups if governance else None) or {}
    for name, group in sorted(groups.items()):
        claim = Claim(
            group_subject(name),
            group.tokens_per_day,
            group.usd_per_day,
            group.requests_per_minute,
            group.tokens_per_minute,
        )
        for agent in group.agents:
            claims.setdefault(agent, []).append(claim)
    return claims


def local_counters(
    governance: Governance | None,
    agents: Iterable[str],
    state_dir: Path,
    today: Callable[[], str] = utc_day,
) -> LocalCounters:
    """This sidecar's own counters of the budgets of ``agents``."""
    every = {claim for claims in budget_claims(governance, agents).values() for claim in claims}
    return LocalCounters(
        state_dir,
        [c.subject for c in every if c.tokens is not None],
        [c.subject for c in every if c.usd is not None],
        today,
    )


class TokenBudgets:
    def __init__(
        self,
        governance: Governance | None,
        agents: Iterable[str],
        state_dir: Path,
        today: Callable[[], str] = utc_day,
        counters: Counters | None = None,
    ) -> None:
        """``counters``: the shared store when the pod names one; else this sidecar's own."""
        agents = list(agents)
        self.claims = {agent: tuple(c) for agent, c in budget_claims(governance, agents).items()}
        self.governed = frozenset(self.claims)
        """The agents a budget applies to, decided once: every other agent's request skips
        the budget gate without a call."""
        self.counters: Counters = counters or local_counters(governance, agents, state_dir, today)

    def counts_usd(self, agent: str) -> bool:
        """Whether a USD budget, the agent's own or a group's, applies to the agent."""
        return any(claim.usd is not None for claim in self.claims.get(agent, ()))

    async def admit(self, agent: str, tokens: int, usd: float) -> Hold | Refused:
        """Hold an estimate of a request's spending against each of the agent's budgets and
        its groups' rates, or say which refused it (see :meth:`Counters.reserve`). Raises
        ``SharedLimitsUnavailable``."""
        return await self.counters.reserve(self.claims[agent], tokens, usd)

    async def release(self, hold: Hold) -> None:
        """A finished request's hold (its real spending is ``spend``'s)."""
        await self.counters.release(hold)

    async def spend(
        self, agent: str, tokens: int, usd: float = 0.0, hold: Hold | None = None
    ) -> None:
        """What a request spent; with its ``hold``, released in the same step (one round trip
        to a shared store instead of two)."""
        claims = self.claims.get(agent)
        if not claims:
            return
        if hold is not None:
            await self.counters.settle(hold, claims, max(tokens, 0), max(usd, 0.0))
        elif tokens > 0 or usd > 0:
            await self.counters.spend(claims, max(tokens, 0), max(usd, 0.0))

    async def today(self) -> list[dict[str, Any]]:
        """Each budget (an agent's or a group's): its limits and what was spent today."""
        every = {claim.subject: claim for claims in self.claims.values() for claim in claims}
        spent = await self.counters.spent(sorted(every))
        return [
            {"subject": subject, "claim": every[subject], "tokens": t, "usd": u}
            for subject, (t, u) in sorted(spent.items())
        ]
