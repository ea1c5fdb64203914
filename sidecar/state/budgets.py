"""What each subject (an agent, a group of agents) spent today against its daily budgets
(SPEC §9.2, §14): tokens and USD, kept in ``<state_dir>/budgets.json`` so a restart does not
hand out a fresh day. The limits are governance's (``governance/budgets.py``); the holds of
running requests are ``state/counters.py``'s."""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections.abc import Callable, Container, Sequence
from pathlib import Path

log = logging.getLogger(__name__)
BUDGETS_FILE = "budgets.json"


def utc_day() -> str:
    return datetime.datetime.now(datetime.UTC).date().isoformat()


class SpentToday:
    """Tokens and USD spent per subject on the current UTC day; a new day starts from zero."""

    def __init__(
        self,
        state_dir: Path,
        token_subjects: Container[str],
        usd_subjects: Container[str],
        today: Callable[[], str] = utc_day,
    ) -> None:
        """``token_subjects``, ``usd_subjects``: the subjects whose spending of each is counted."""
        self._path = Path(state_dir) / BUDGETS_FILE
        self._today = today
        self._day = today()
        self.tokens: dict[str, int] = {}
        self.usd: dict[str, float] = {}
        self._counted = (token_subjects, usd_subjects)
        self._load(token_subjects, usd_subjects)

    @property
    def day(self) -> str:
        return self._day

    def _load(self, token_subjects: Container[str], usd_subjects: Container[str]) -> None:
        try:
            saved = json.loads(self._path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("budgets file is unreadable; counting from zero: %s", exc)
            return
        if isinstance(saved, dict) and saved.get("day") == self._day:
            spent = saved.get("spent", {})
            self.tokens = {a: int(n) for a, n in spent.items() if a in token_subjects}
            usd = saved.get("spent_usd", {})
            self.usd = {a: float(n) for a, n in usd.items() if a in usd_subjects}

    def roll(self) -> None:
        """Start the new day's counts once the UTC day changed."""
        today = self._today()
        if today != self._day:
            self._day, self.tokens, self.usd = today, {}, {}

    def add(self, subjects: Sequence[str], tokens: int, usd: float) -> None:
        """Count spending of each subject with such a budget and write the day's counts (a
        failed write is logged, not raised: the counts in memory still hold)."""
        self.roll()
        token_subjects, usd_subjects = self._counted
        for subject in subjects:
            if tokens > 0 and subject in token_subjects:
                self.tokens[subject] = self.tokens.get(subject, 0) + tokens
            if usd > 0 and subject in usd_subjects:
                self.usd[subject] = self.usd.get(subject, 0.0) + usd
        record = {"day": self._day, "spent": self.tokens, "spent_usd": self.usd}
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self._path.with_suffix(".tmp")
            temporary.write_text(json.dumps(record))
            os.replace(temporary, self._path)
        except OSError as exc:
            log.warning("budgets file could not be written: %s", exc)
