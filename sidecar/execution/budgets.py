"""Token budgets (SPEC §9.2): ``x-claw.budgets: {<agent or *>: {tokens-per-day: N}}``.

Each agent with a budget (its own, else ``*``'s) may spend N tokens (input + output, as the
sidecar accounts every request) per UTC day; once spent, its LLM requests are refused with 429
until the day ends. A request already running finishes. Spending is kept in
``<state_dir>/budgets.json`` so a restart does not hand out a fresh day.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from clawpod.sidecar.manifest import Governance

log = logging.getLogger("sidecar.budgets")
EVERY_AGENT = "*"


def utc_day() -> str:
    return datetime.datetime.now(datetime.UTC).date().isoformat()


class TokenBudgets:
    def __init__(
        self,
        governance: Governance | None,
        agents: Iterable[str],
        state_dir: Path,
        today: Callable[[], str] = utc_day,
    ) -> None:
        budgets = governance.budgets if governance is not None else {}
        self.limits = {
            agent: budgets[agent] if agent in budgets else budgets[EVERY_AGENT]
            for agent in agents
            if agent in budgets or EVERY_AGENT in budgets
        }
        self._path = Path(state_dir) / "budgets.json"
        self._today = today
        self._day = today()
        self._spent: dict[str, int] = {}
        self._load()

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

    def _roll(self) -> None:
        today = self._today()
        if today != self._day:
            self._day, self._spent = today, {}

    def remaining(self, agent: str) -> int | None:
        """Tokens left today; None when the agent has no budget."""
        limit = self.limits.get(agent)
        if limit is None:
            return None
        self._roll()
        return max(0, limit - self._spent.get(agent, 0))

    def spend(self, agent: str, tokens: int) -> None:
        if agent not in self.limits or tokens <= 0:
            return
        self._roll()
        self._spent[agent] = self._spent.get(agent, 0) + tokens
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self._path.with_suffix(".tmp")
            temporary.write_text(json.dumps({"day": self._day, "spent": self._spent}))
            os.replace(temporary, self._path)
        except OSError as exc:
            log.warning("budgets file could not be written: %s", exc)
