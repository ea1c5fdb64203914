"""Daily budgets (SPEC §9.2, §14): ``x-claw.budgets: {<agent or *>: {tokens-per-day: N,
usd-per-day: X}}``.

Each agent with a budget (its own, else ``*``'s) may spend N tokens (input + output, as the
sidecar accounts every request) and X USD (at the pod's prices) per UTC day; once either is
spent, its LLM requests are refused with 429 until the day ends. A request already running
finishes. Each running request holds an estimate of what it will spend (``admit``), so
parallel requests cannot all start on the same remainder. What was spent is kept by
``state/budgets.py``, so a restart does not hand out a fresh day.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from ..manifest import Governance
from ..state.budgets import SpentToday, utc_day

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


class TokenBudgets:
    def __init__(
        self,
        governance: Governance | None,
        agents: Iterable[str],
        state_dir: Path,
        today: Callable[[], str] = utc_day,
    ) -> None:
        agents = list(agents)
        self.limits = _limits_of(governance.budgets if governance else {}, agents)
        usd_budgets = governance.usd_budgets if governance else None
        self.usd_limits = _limits_of(usd_budgets or {}, agents)
        self.governed = frozenset(self.limits) | frozenset(self.usd_limits)
        """The agents a budget applies to, decided once: every other agent's request skips
        the budget gate without a call."""
        self._spent = SpentToday(state_dir, self.limits, self.usd_limits, today)
        self._held: Counter[str] = Counter()
        self._held_usd: dict[str, float] = {}

    def admit(self, agent: str, tokens: int, usd: float) -> bool:
        """Hold an estimate of a request's spending, or refuse it. A request that finds the
        budget spent (what was spent plus what running requests hold) is refused; so is one
        whose estimate does not fit beside requests already running. Alone, a request may
        start on any remainder (a day's last request is not refused for its size)."""
        spent = self._spent
        spent.roll()
        held, held_usd = self._held[agent], self._held_usd.get(agent, 0.0)
        checks = (
            (self.limits.get(agent), spent.tokens.get(agent, 0), held, tokens),
            (self.usd_limits.get(agent), spent.usd.get(agent, 0.0), held_usd, usd),
        )
        for limit, spent_today, holding, estimate in checks:
            if limit is None:
                continue
            if spent_today + holding >= limit or (
                holding and spent_today + holding + estimate > limit
            ):
                return False
        self._held[agent] += tokens
        self._held_usd[agent] = held_usd + usd
        return True

    def release(self, agent: str, tokens: int, usd: float) -> None:
        """A finished request's hold (its real spending is ``spend``'s)."""
        self._held[agent] = max(0, self._held[agent] - tokens)
        self._held_usd[agent] = max(0.0, self._held_usd.get(agent, 0.0) - usd)

    def remaining(self, agent: str) -> int | None:
        """Tokens left today; None when the agent has no budget."""
        limit = self.limits.get(agent)
        if limit is None:
            return None
        self._spent.roll()
        return max(0, limit - self._spent.tokens.get(agent, 0))

    def remaining_usd(self, agent: str) -> float | None:
        """Dollars left today; None when the agent has no USD budget (the console shows it)."""
        limit = self.usd_limits.get(agent)
        if limit is None:
            return None
        self._spent.roll()
        return max(0.0, limit - self._spent.usd.get(agent, 0.0))

    def spend(self, agent: str, tokens: int, usd: float = 0.0) -> None:
        tokens = tokens if agent in self.limits and tokens > 0 else 0
        usd = usd if agent in self.usd_limits and usd > 0 else 0.0
        if tokens or usd:
            self._spent.add(agent, tokens, usd)
