"""The counters behind rates and budgets (SPEC §9.2, §14, §24), behind one small interface
(:class:`Counters`): ``LocalCounters`` here keeps them for one sidecar (what was spent in
``<state>/budgets.json``, holds and rate buckets in memory); ``state/shared_counters.py``
keeps them in Redis or Valkey for every sidecar that names the same server.

A counter belongs to a *subject*: an agent of this pod (its id), a group of agents across
pods (``group:NAME``, ``x-claw.budget-groups``), or an end user across the pod's agents and
pods (``user:SUBJECT``, ``x-claw.end-user-limits``, SPEC §21); nothing below needs to know
which kind a subject is, except which subjects are counted at all (``CountedSubjects``).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..manifest import Rate
from .budgets import SpentToday, utc_day

GROUP_PREFIX = "group:"
SHARED_LIMITS_UNAVAILABLE = "shared_limits_unavailable"
"""The error code of a request or call refused because the shared store cannot be reached."""
RateKey = tuple[str, str, int]
"""(agent, tool, rule number): one tool rule's rate for one agent."""


USER_PREFIX = "user:"


def group_subject(name: str) -> str:
    return GROUP_PREFIX + name


def user_subject(subject: str) -> str:
    """An end user's counter, by the subject their verified token names."""
    return USER_PREFIX + subject


class CountedSubjects:
    """The subjects whose spending is kept: the named ones, and every end user when the pod
    budgets end users (their subjects are known only as their requests come)."""

    __slots__ = ("_names", "_users")

    def __init__(self, names: Iterable[str], users: bool = False) -> None:
        self._names = frozenset(names)
        self._users = users

    def __contains__(self, subject: object) -> bool:
        return subject in self._names or (
            self._users and isinstance(subject, str) and subject.startswith(USER_PREFIX)
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """One subject's daily limits a request is checked against (None: no such limit)."""

    subject: str
    tokens: int | None
    usd: float | None


@dataclass(frozen=True, slots=True)
class Hold:
    """What a running request holds against each subject's budgets until it is released."""

    day: str
    subjects: tuple[str, ...]
    tokens: int
    usd: float
    id: str
    shared: bool
    """Held in the shared store (False: in this sidecar's own counters)."""


class SharedLimitsUnavailable(Exception):
    """The shared store cannot be reached and the pod chose ``on-unreachable: fail-closed``."""


class RateCounters(Protocol):
    async def take(self, key: RateKey, rate: Rate) -> bool:
        """One call from the bucket of ``key``; False when it is empty."""
        ...

    def levels(self) -> dict[RateKey, float]:
        """Calls each bucket drawn from would admit now, as last seen (for the console)."""
        ...


class Counters(RateCounters, Protocol):
    """Spending per subject and day, holds of running requests, and rate buckets."""

    async def reserve(self, claims: Sequence[Claim], tokens: int, usd: float) -> Hold | None:
        """Hold a request's estimate against every claim at once, or None (nothing held) when
        one of them refuses it. A request that finds a budget spent (spent plus held) is
        refused; so is one whose estimate does not fit beside requests already running.
        Alone, a request may start on any remainder (a day's last request is not refused for
        its size)."""
        ...

    async def release(self, hold: Hold) -> None: ...

    async def spend(self, subjects: Sequence[str], tokens: int, usd: float) -> None: ...

    async def spent(self, subjects: Sequence[str]) -> dict[str, tuple[int, float]]:
        """Tokens and USD each subject spent today."""
        ...


def refuses(limit: float | None, spent: float, held: float, estimate: float) -> bool:
    """Today's admission rule of one limit (see :meth:`Counters.reserve`)."""
    if limit is None:
        return False
    return spent + held >= limit or (held > 0 and spent + held + estimate > limit)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RateBuckets:
    """A token bucket per key: it holds up to N calls and refills at N per period, so a burst
    of N passes and then calls pass as fast as the rate allows."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[RateKey, _Bucket] = {}
        self._rates: dict[RateKey, Rate] = {}

    async def take(self, key: RateKey, rate: Rate) -> bool:
        return self.take_now(key, rate)

    def take_now(self, key: RateKey, rate: Rate) -> bool:
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(rate.count), now)
            self._rates[key] = rate
        refill = (now - bucket.updated) * rate.count / rate.period_s
        bucket.tokens = min(float(rate.count), bucket.tokens + refill)
        bucket.updated = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    def seen(self, key: RateKey, rate: Rate, tokens: float) -> None:
        """Note a level another store decided (the console shows it)."""
        self._buckets[key] = _Bucket(tokens, self._clock())
        self._rates[key] = rate

    def levels(self) -> dict[RateKey, float]:
        """A bucket nobody has drawn from yet is absent (it is full)."""
        now = self._clock()
        return {
            key: min(
                float(rate.count),
                self._buckets[key].tokens
                + (now - self._buckets[key].updated) * rate.count / rate.period_s,
            )
            for key, rate in self._rates.items()
        }


class LocalCounters:
    """One sidecar's counters: what was spent, on disk so a restart does not hand out a fresh
    day; holds and rate buckets in memory."""

    def __init__(
        self,
        state_dir: Path,
        token_subjects: Container[str] = (),
        usd_subjects: Container[str] = (),
        today: Callable[[], str] = utc_day,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``token_subjects``, ``usd_subjects``: the subjects whose spending of each is kept."""
        self._spent = SpentToday(state_dir, token_subjects, usd_subjects, today)
        self._held: Counter[str] = Counter()
        self._held_usd: dict[str, float] = {}
        self.rates = RateBuckets(clock)

    def reserve_now(self, claims: Sequence[Claim], tokens: int, usd: float) -> Hold | None:
        spent = self._spent
        spent.roll()
        for claim in claims:
            held, held_usd = self._held[claim.subject], self._held_usd.get(claim.subject, 0.0)
            if refuses(claim.tokens, spent.tokens.get(claim.subject, 0), held, tokens):
                return None
            if refuses(claim.usd, spent.usd.get(claim.subject, 0.0), held_usd, usd):
                return None
        subjects = tuple(claim.subject for claim in claims)
        for subject in subjects:
            self._held[subject] += tokens
            self._held_usd[subject] = self._held_usd.get(subject, 0.0) + usd
        return Hold(spent.day, subjects, tokens, usd, uuid.uuid4().hex, shared=False)

    async def reserve(self, claims: Sequence[Claim], tokens: int, usd: float) -> Hold | None:
        return self.reserve_now(claims, tokens, usd)

    def release_now(self, hold: Hold) -> None:
        for subject in hold.subjects:
            self._held[subject] = max(0, self._held[subject] - hold.tokens)
            self._held_usd[subject] = max(0.0, self._held_usd.get(subject, 0.0) - hold.usd)

    async def release(self, hold: Hold) -> None:
        self.release_now(hold)

    def spend_now(self, subjects: Sequence[str], tokens: int, usd: float) -> None:
        self._spent.add(subjects, tokens, usd)

    async def spend(self, subjects: Sequence[str], tokens: int, usd: float) -> None:
        self.spend_now(subjects, tokens, usd)

    async def spent(self, subjects: Sequence[str]) -> dict[str, tuple[int, float]]:
        spent = self._spent
        spent.roll()
        return {s: (spent.tokens.get(s, 0), spent.usd.get(s, 0.0)) for s in subjects}

    async def take(self, key: RateKey, rate: Rate) -> bool:
        return self.rates.take_now(key, rate)

    def levels(self) -> dict[RateKey, float]:
        return self.rates.levels()
