"""Daily budgets (SPEC §9.2, §14): ``x-claw.budgets: {<agent or *>: {tokens-per-day: N,
usd-per-day: X}}``.

Each agent with a budget (its own, else ``*``'s) may spend N tokens (input + output, as the
sidecar accounts every request) and X USD (at the pod's prices) per UTC day; once either is
spent, its LLM requests are refused with 429 until the day ends. A request already running
finishes. Each running request holds an estimate of what it will spend (``admit``), so
parallel requests cannot all start on the same remainder. Spending is kept in
``<state_dir>/budgets.json`` so a restart does not hand out a fresh day.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from clawpod.sidecar.manifest import Governance

log = logging.getLogger("sidecar.budgets")
EVERY_AGENT = "*"
T = TypeVar("T", int, float)


def utc_day() -> str:
    return datetime.datetime.now(datetime.UTC).date().isoformat()


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
        self._path = Path(state_dir) / "budgets.json"
        self._today = today
        self._day = today()
        self._spent: dict[str, int] = {}
        self._spent_usd: dict[str, float] = {}
        self._held: Counter[str] = Counter()
        self._held_usd: dict[str, float] = {}
        self._load()

    def governs(self, agent: str) -> bool:
        return agent in self.limits or agent in self.usd_limits

    def admit(self, agent: str, tokens: int, usd: float) -> bool:
        """Hold an estimate of a request's spending, or refuse it. A request that finds the
        budget spent (what was spent plus what running requests hold) is refused; so is one
        whose estimate does not fit beside requests already running. Alone, a request may
        start on any remainder (a day's last request is not refused for its size)."""
        self._roll()
        held, held_usd = self._held[agent], self._held_usd.get(agent, 0.0)
        checks = (
            (self.limits.get(agent), self._spent.get(agent, 0), held, tokens),
            (self.usd_limits.get(agent), self._spent_usd.get(agent, 0.0), held_usd, usd),
        )
        for limit, spent, holding, estimate in checks:
            if limit is None:
                continue
            if spent + holding >= limit or (holding and spent + holding + estimate > limit):
                return False
        self._held[agent] += tokens
        self._held_usd[agent] = held_usd + usd
        return True

    def release(self, agent: str, tokens: int, usd: float) -> None:
        """A finished request's hold (its real spending is ``spend``'s)."""
        self._held[agent] = max(0, self._held[agent] - tokens)
        self._held_usd[agent] = max(0.0, self._held_usd.get(agent, 0.0) - usd)

    def _load(self) -> None:
        try:
            saved = json.loads(self._path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("budgets file is unreadable; counting from zero: %s", exc)
            return
        if isinstance(saved, dict) and saved.get("day") == self._day:
            spent = saved.get("spent", {})
            self._spent = {a: int(n) for a, n in spent.items() if a in self.limits}
            usd = saved.get("spent_usd", {})
            self._spent_usd = {a: float(n) for a, n in usd.items() if a in self.usd_limits}

    def _roll(self) -> None:
        today = self._today()
        if today != self._day:
            self._day, self._spent, self._spent_usd = today, {}, {}

    def remaining(self, agent: str) -> int | None:
        """Tokens left today; None when the agent has no budget."""
        limit = self.limits.get(agent)
        if limit is None:
            return None
        self._roll()
        return max(0, limit - self._spent.get(agent, 0))

    def remaining_usd(self, agent: str) -> float | None:
        """Dollars left today; None when the agent has no USD budget (the console shows it)."""
        limit = self.usd_limits.get(agent)
        if limit is None:
            return None
        self._roll()
        return max(0.0, limit - self._spent_usd.get(agent, 0.0))

    def spend(self, agent: str, tokens: int, usd: float = 0.0) -> None:
        tokens = tokens if agent in self.limits and tokens > 0 else 0
        usd = usd if agent in self.usd_limits and usd > 0 else 0.0
        if not (tokens or usd):
            return
        self._roll()
        if tokens:
            self._spent[agent] = self._spent.get(agent, 0) + tokens
        if usd:
            self._spent_usd[agent] = self._spent_usd.get(agent, 0.0) + usd
        record = {"day": self._day, "spent": self._spent, "spent_usd": self._spent_usd}
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self._path.with_suffix(".tmp")
            temporary.write_text(json.dumps(record))
            os.replace(temporary, self._path)
        except OSError as exc:
            log.warning("budgets file could not be written: %s", exc)
