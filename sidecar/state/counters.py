"""The counters behind rates and budgets (SPEC §9.2, §14, §24), behind one small interface
(:class:`Counters`): ``LocalCounters`` here keeps them for one sidecar (what was spent in
``<state>/budgets.json``, holds and rate buckets in memory); ``state/shared_counters.py``
keeps them in Redis or Valkey for every sidecar that names the same server.

A counter belongs to a *subject*: an agent of this pod (its id), a group of agents across
pods (``group:NAME``, ``x-claw.budget-groups``), or an end user across the pod's agents and
pods (``user:SUBJECT``, ``x-claw.end-user-limits``, SPEC §21); nothing below needs to know
which kind a subject is, except which subjects are counted at all (``CountedSubjects``).
A subject's limits are per UTC day (tokens, USD) and, for a group, may be per minute too
(requests, tokens): the same rule in a window of a minute, checked in the same reservation.
"""

from __future__ import annotations

import datetime
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


def utc_minute() -> str:
    """The current minute's window (UTC), ``YYYY-MM-DDTHH:MM``."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M")


@dataclass(frozen=True, slots=True)
class Claim:
    """One subject's limits a request is checked against (None: no such limit): per UTC day,
    and per minute (a group's rates)."""

    subject: str
    tokens: int | None
    usd: float | None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    @property
    def per_minute(self) -> bool:
        return self.requests_per_minute is not None or self.tokens_per_minute is not None


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
    minute: str = ""
    minute_subjects: tuple[str, ...] = ()
    """The subjects whose per-minute tokens it holds too, in the window of ``minute``."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A request a limit refused: a day's budget, or a group's rate in this minute (the
    client may try again in the next one). False, as no hold is."""

    per_minute: bool

    def __bool__(self) -> bool:
        return False


DAY_REFUSED, MINUTE_REFUSED = Refused(per_minute=False), Refused(per_minute=True)


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

    async def reserve(self, claims: Sequence[Claim], tokens: int, usd: float) -> Hold | Refused:
        """Hold a request's estimate against every claim at once, or say which window refused
        it (nothing held). A request that finds a budget spent (spent plus held) is
        refused; so is one whose estimate does not fit beside requests already running.
        Alone, a request may start on any remainder (a day's last request is not refused for
        its size)."""
        ...

    async def release(self, hold: Hold) -> None: ...

    async def spend(self, claims: Sequence[Claim], tokens: int, usd: float) -> None:
        """A finished request's spending: today's, and this minute's where a claim has rates."""
        ...

    async def settle(self, hold: Hold, claims: Sequence[Claim], tokens: int, usd: float) -> None:
        """A finished request's hold released and its spending counted, at once."""
        ...

    async def spent(self, subjects: Sequence[str]) -> dict[str, tuple[int, float]]:
        """Tokens and USD each subject spent today."""
        ...


def refuses(limit: float | None, spent: float, held: float, estimate: float) -> bool:
    """The admission rule of one limit in its window (see :meth:`Counters.reserve`)."""
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
        this_minute: Callable[[], str] = utc_minute,
    ) -> None:
        """``token_subjects``, ``usd_subjects``: the subjects whose spending of each is kept."""
        self._spent = SpentToday(state_dir, token_subjects, usd_subjects, today)
        self._held: Counter[str] = Counter()
        self._held_usd: dict[str, float] = {}
        self.rates = RateBuckets(clock)
        self._this_minute = this_minute
        self._minute = ""
        # This minute's tokens, holds and requests per subject, in memory: a restart loses a
        # minute.
        self._minute_tokens: Counter[str] = Counter()
        self._minute_held: Counter[str] = Counter()
        self._minute_requests: Counter[str] = Counter()

    def reserve_now(self, claims: Sequence[Claim], tokens: int, usd: float) -> Hold | Refused:
        spent = self._spent
        spent.roll()
        minute = self._roll_minute()
        for claim in claims:
            held, held_usd = self._held[claim.subject], self._held_usd.get(claim.subject, 0.0)
            if refuses(claim.tokens, spent.tokens.get(claim.subject, 0), held, tokens):
                return DAY_REFUSED
            if refuses(claim.usd, spent.usd.get(claim.subject, 0.0), held_usd, usd):
                return DAY_REFUSED
            if claim.per_minute and self._minute_refuses(claim, minute, tokens):
                return MINUTE_REFUSED
        subjects = tuple(claim.subject for claim in claims)
        for subject in subjects:
            self._held[subject] += tokens
            self._held_usd[subject] = self._held_usd.get(subject, 0.0) + usd
        rated = tuple(claim.subject for claim in claims if claim.per_minute)
        for subject in rated:
            self._minute_held[subject] += tokens
            self._minute_requests[subject] += 1  # a request counts when it starts
        hold_id = uuid.uuid4().hex
        return Hold(spent.day, subjects, tokens, usd, hold_id, False, minute, rated)

    def _minute_refuses(self, claim: Claim, minute: str, tokens: int) -> bool:
        held = self._minute_held[claim.subject]
        spent = self._minute_tokens[claim.subject]
        if refuses(claim.tokens_per_minute, spent, held, tokens):
            return True
        limit = claim.requests_per_minute
        return limit is not None and self._minute_requests[claim.subject] >= limit

    def _roll_minute(self) -> str:
        minute = self._this_minute()
        if minute != self._minute:
            self._minute = minute
            self._minute_tokens.clear()
            self._minute_held.clear()  # a past minute's holds count in no window
            self._minute_requests.clear()
        return minute

    async def reserve(self, claims: Sequence[Claim], tokens: int, usd: float) -> Hold | Refused:
        return self.reserve_now(claims, tokens, usd)

    def release_now(self, hold: Hold) -> None:
        for subject in hold.subjects:
            self._held[subject] = max(0, self._held[subject] - hold.tokens)
            self._held_usd[subject] = max(0.0, self._held_usd.get(subject, 0.0) - hold.usd)
        if hold.minute == self._minute:
            for subject in hold.minute_subjects:
                self._minute_held[subject] = max(0, self._minute_held[subject] - hold.tokens)

    async def release(self, hold: Hold) -> None:
        self.release_now(hold)

    def spend_now(self, claims: Sequence[Claim], tokens: int, usd: float) -> None:
        self._spent.add([claim.subject for claim in claims], tokens, usd)
        self._roll_minute()
        for claim in claims:
            if claim.per_minute:
                self._minute_tokens[claim.subject] += tokens

    async def spend(self, claims: Sequence[Claim], tokens: int, usd: float) -> None:
        self.spend_now(claims, tokens, usd)

    async def settle(self, hold: Hold, claims: Sequence[Claim], tokens: int, usd: float) -> None:
        self.release_now(hold)
        self.spend_now(claims, tokens, usd)

    async def spent(self, subjects: Sequence[str]) -> dict[str, tuple[int, float]]:
        spent = self._spent
        spent.roll()
        return {s: (spent.tokens.get(s, 0), spent.usd.get(s, 0.0)) for s in subjects}

    async def take(self, key: RateKey, rate: Rate) -> bool:
        return self.rates.take_now(key, rate)

    def levels(self) -> dict[RateKey, float]:
        return self.rates.levels()
