"""Daily budgets (SPEC §9.2, §14, §24): ``x-claw.budgets: {<agent or *>: {tokens-per-day: N,
usd-per-day: X}}`` and ``x-claw.budget-groups: {NAME: {agents: [...], tokens-per-day: N,
usd-per-day: X}}``.

Each agent with a budget (its own, else ``*``'s) may spend N tokens (input + output, as the
sidecar accounts every request) and X USD (at the pod's prices) per UTC day; a group's agents
together (with the same group's agents in every pod sharing the store) may spend the group's.
With ``x-claw.end-user-limits: {tokens-per-day: N, usd-per-day: X}`` each verified end user
(SPEC §21) may spend as much across the pod's agents (and across pods sharing the store): a
request for an end user is checked against the agent's budgets and the end user's at once.
Once any budget of a request is spent, it is refused with 429 until the day ends.
A request already running finishes. Each running request holds an estimate of what it will
spend (``admit``), so parallel requests cannot all start on the same remainder. The counts are
the store's (``state/counters.py``: this sidecar's state directory, or the shared store).
"""

from __future__ import annotations

import datetime
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from ..manifest import EndUserLimits, Governance
from ..model.end_user import EndUser
from ..state.budgets import utc_day
from ..state.counters import (
    Claim,
    CountedSubjects,
    Counters,
    Hold,
    LocalCounters,
    Refused,
    group_subject,
    user_subject,
)

EVERY_AGENT = "*"
# The end users the console can list: the most recent this sidecar admitted.
MAX_KNOWN_END_USERS = 10_000
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
    users = (governance.end_user_limits if governance else None) or EndUserLimits()
    return LocalCounters(
        state_dir,
        CountedSubjects(
            [c.subject for c in every if c.tokens is not None], users.tokens_per_day is not None
        ),
        CountedSubjects(
            [c.subject for c in every if c.usd is not None], users.usd_per_day is not None
        ),
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
        the budget gate without a call (unless an end user's budget applies to it)."""
        self.end_user_limits = governance.end_user_limits if governance else None
        self.counters: Counters = counters or local_counters(governance, agents, state_dir, today)
        self._end_users: OrderedDict[str, None] = OrderedDict()
        """The end users this sidecar admitted, most recent last: whom ``end_users_today``
        lists (the counters cannot list a shared store's subjects)."""

    def applies(self, agent: str, end_user: EndUser | None) -> bool:
        """Whether a request of ``agent`` for ``end_user`` is admitted, held and charged."""
        return agent in self.governed or (end_user is not None and self.end_user_limits is not None)

    def claims_of(self, agent: str, end_user: EndUser | None = None) -> tuple[Claim, ...]:
        """The agent's budgets, and its end user's when the pod budgets end users."""
        claims = self.claims.get(agent, ())
        limits = self.end_user_limits
        if end_user is None or limits is None:
            return claims
        user = Claim(user_subject(end_user.subject), limits.tokens_per_day, limits.usd_per_day)
        return (*claims, user)

    def counts_usd(self, agent: str, end_user: EndUser | None = None) -> bool:
        """Whether a USD budget (the agent's own, a group's, its end user's) applies."""
        return any(claim.usd is not None for claim in self.claims_of(agent, end_user))

    async def admit(
        self, agent: str, tokens: int, usd: float, end_user: EndUser | None = None
    ) -> Hold | Refused:
        """Hold an estimate of a request's spending against each of its budgets (the agent's,
        its groups' with their rates, its end user's), or say which refused it (see
        :meth:`Counters.reserve`). Raises ``SharedLimitsUnavailable``."""
        if end_user is not None and self.end_user_limits is not None:
            self.note_end_user(end_user.subject)
        return await self.counters.reserve(self.claims_of(agent, end_user), tokens, usd)

    async def release(self, hold: Hold) -> None:
        """A finished request's hold (its real spending is ``spend``'s)."""
        await self.counters.release(hold)

    async def spend(
        self,
        agent: str,
        tokens: int,
        usd: float = 0.0,
        hold: Hold | None = None,
        end_user: EndUser | None = None,
    ) -> None:
        """What a request spent; with its ``hold``, released in the same step (one round trip
        to a shared store instead of two)."""
        claims = self.claims_of(agent, end_user)
        if not claims:
            return
        if hold is not None:
            await self.counters.settle(hold, claims, max(tokens, 0), max(usd, 0.0))
        elif tokens > 0 or usd > 0:
            await self.counters.spend(claims, max(tokens, 0), max(usd, 0.0))

    def note_end_user(self, subject: str) -> None:
        """An end user this sidecar admits a request for (budget or rate)."""
        known = self._end_users
        known[subject] = None
        known.move_to_end(subject)
        if len(known) > MAX_KNOWN_END_USERS:
            known.popitem(last=False)

    async def end_users_today(self, top: int) -> tuple[list[dict[str, Any]], int]:
        """The ``top`` end users by what they spent today (USD, then tokens), each with the
        requests their rate has left now (None: not counted yet), and how many more there are.
        Raises ``SharedLimitsUnavailable``."""
        subjects = list(self._end_users)
        spent = await self.counters.spent([user_subject(s) for s in subjects])
        levels = self.counters.levels()
        rows = [
            {
                "subject": subject,
                "tokens": spent[user_subject(subject)][0],
                "usd": spent[user_subject(subject)][1],
                "requests_left": levels.get((user_subject(subject), "requests", 0)),
            }
            for subject in subjects
        ]
        rows.sort(key=lambda row: (-row["usd"], -row["tokens"], row["subject"]))
        return rows[:top], max(0, len(rows) - top)

    async def today(self) -> list[dict[str, Any]]:
        """Each budget (an agent's or a group's): its limits and what was spent today."""
        every = {claim.subject: claim for claims in self.claims.values() for claim in claims}
        spent = await self.counters.spent(sorted(every))
        return [
            {"subject": subject, "claim": every[subject], "tokens": t, "usd": u}
            for subject, (t, u) in sorted(spent.items())
        ]
