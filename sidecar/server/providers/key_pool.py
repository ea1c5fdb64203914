"""A provider's keys (SPEC §14): requests rotate over them; a rate-limited key rests, a refused
key is out until restart. Keys are known by their label (the variable that holds them), which
is all that ever reaches an audit record, a metric or a log line.

A key rests or goes out only on evidence about the key, never on an answer the request itself
caused (docs/providers.md): any agent could otherwise take every key of a pool away with one
request. ``blame_429`` reads that evidence from a 429; a 401 or 402 (the key unknown or
unpaid: nothing an agent sends can cause it, billing headers being the pod's) rests a key and,
repeated, retires it; a 403 is about what the request names (a model, an object) and is the
agent's alone."""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import orjson

DEFAULT_REST_S = 60.0
# Longest rest a provider's retry-after can impose: a longer one is not believed (default rest).
MAX_REST_S = 3600.0
# Statuses that say the key itself is bad (unknown, unpaid): it rests, and is out until restart
# once refused this many times in a row.
KEY_REFUSED = frozenset({401, 402})
REFUSALS_TO_RETIRE = 2
# How much of a 429's body is read for evidence (providers' error bodies are a few hundred bytes).
MAX_EVIDENCE_BYTES = 16384


@dataclass(slots=True)
class PoolKey:
    label: str
    value: str | None
    resting_until: float = 0.0
    retired: bool = False
    refusals: int = 0
    """401/402 answers in a row; a served request starts the count again."""


class KeyPool:
    """Round-robin over the keys that are neither resting nor retired."""

    def __init__(
        self, labels: list[str], env: Mapping[str, str], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.keys = [PoolKey(label, env.get(label) or None) for label in labels]
        self._next = 0
        self._clock = clock

    @property
    def pooled(self) -> bool:
        """More than one key: rests and retirements apply. A single key keeps the provider's
        own answers (its 429 goes to the client as it came)."""
        return len(self.keys) > 1

    def take(self) -> PoolKey | None:
        """The next usable key, or None when every key rests or is out."""
        now = self._clock()
        count = len(self.keys)
        for step in range(count):
            key = self.keys[(self._next + step) % count]
            if not key.retired and key.resting_until <= now:
                self._next = (self._next + step + 1) % count
                return key
        return None

    def rest(self, key: PoolKey, seconds: float | None) -> float:
        """Rest ``key`` for ``seconds`` (the provider's retry-after), else the default."""
        pause = DEFAULT_REST_S if seconds is None else min(max(seconds, 0.0), MAX_REST_S)
        key.resting_until = self._clock() + pause
        return pause

    def refused(self, key: PoolKey) -> bool:
        """A 401/402 for ``key``: it rests, and is out until restart once refused
        ``REFUSALS_TO_RETIRE`` times in a row (one answer may be the provider's own fault).
        True when it is out."""
        key.refusals += 1
        if key.refusals >= REFUSALS_TO_RETIRE:
            key.retired = True
        else:
            self.rest(key, None)
        return key.retired

    @staticmethod
    def served(key: PoolKey) -> None:
        """The provider took ``key``: earlier refusals were passing."""
        key.refusals = 0

    def usable(self) -> bool:
        now = self._clock()
        return any(not k.retired and k.resting_until <= now for k in self.keys)

    def seconds_until_ready(self) -> float | None:
        """When the first resting key is back; None when every key is out until restart."""
        now = self._clock()
        waits = [max(0.0, k.resting_until - now) for k in self.keys if not k.retired]
        return min(waits) if waits else None


def retry_after_s(headers: Mapping[str, str] | object) -> float | None:
    """A provider's ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date), if any
    believable: a value that is not a finite number from 0 to ``MAX_REST_S`` is none."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    milliseconds = _believable(get("retry-after-ms"), 1000)
    if milliseconds is not None:
        return milliseconds
    value = get("retry-after")
    if not value:
        return None
    seconds = _believable(value, 1)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if when.tzinfo is None:  # not an HTTP date (those are GMT)
        return None
    wait = when.timestamp() - time.time()
    return max(0.0, wait) if wait <= MAX_REST_S else None


def _believable(value: str | None, per_second: int) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value) / per_second
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and 0 <= seconds <= MAX_REST_S else None


# --- whose fault a 429 is ------------------------------------------------------------------------

Blame = Literal["key", "request", "unknown"]
# "Limit 30000, Requested 31538" with no "Used": the request alone is over the key's limit.
_OVER_ALONE = re.compile(r"Limit (\d+), Requested (\d+)")
# Error types and codes that name a key's (its account's) own limits.
_KEY_LIMITS = frozenset(
    {"insufficient_quota", "rate_limit_exceeded", "rate_limit_error", "requests", "tokens"}
)


def blame_429(headers: Mapping[str, str], body: bytes) -> Blame:
    """Whether a 429 is evidence about the key (a counter of it ran out, its account's quota,
    a rate limit its use reached), about the request (larger than the key's whole limit:
    every key would refuse it), or neither.

    The evidence is the providers' own: OpenAI's ``x-ratelimit-remaining-*`` and ``-limit-*``
    headers and its messages ("Rate limit reached for …: Limit L, Used U, Requested R" is the
    key, "Request too large for …: Limit L, Requested R" the request), Anthropic's
    ``anthropic-ratelimit-*-remaining`` and ``*-limit`` (a key that refuses with every token
    counter full refuses the request, not its use) and its ``rate_limit_error``."""
    remaining, limits = _counters(headers)
    if 0 in remaining.values():
        return "key"
    error = _error_of(body)
    message = str(error.get("message") or "")
    if message.startswith("Request too large") or _over_alone(message):
        return "request"
    tokens = [name for name in remaining if "tokens" in name and name in limits]
    if tokens and all(remaining[name] >= limits[name] for name in tokens):
        return "request"
    kinds = {error.get("type"), error.get("code")}
    if remaining or not _KEY_LIMITS.isdisjoint(kinds):
        return "key"
    return "unknown"


def _counters(headers: Mapping[str, str]) -> tuple[dict[str, int], dict[str, int]]:
    """Each rate-limit counter's remaining count and limit, by its name (``tokens``, …)."""
    remaining: dict[str, int] = {}
    limits: dict[str, int] = {}
    for name, value in headers.items():
        lower = name.lower()
        if not lower.startswith(("x-ratelimit-", "anthropic-ratelimit-")):
            continue
        counter = lower.removeprefix("x-ratelimit-").removeprefix("anthropic-ratelimit-")
        try:
            number = int(value.strip())
        except ValueError:
            continue
        if counter.startswith("remaining-"):
            remaining[counter.removeprefix("remaining-")] = number
        elif counter.startswith("limit-"):
            limits[counter.removeprefix("limit-")] = number
        elif counter.endswith("-remaining"):
            remaining[counter.removesuffix("-remaining")] = number
        elif counter.endswith("-limit"):
            limits[counter.removesuffix("-limit")] = number
    return remaining, limits


def _over_alone(message: str) -> bool:
    if "Used" in message:
        return False
    found = _OVER_ALONE.search(message)
    return found is not None and int(found[2]) > int(found[1])


def _error_of(body: bytes) -> dict[str, object]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return error if isinstance(error, dict) else {}


def retry_after_header(seconds: float) -> str:
    """Whole seconds, rounded up: a client that waits that long finds a key ready."""
    return str(max(1, math.ceil(seconds)))
