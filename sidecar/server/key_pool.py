"""A provider's keys (SPEC §14): requests rotate over them; a rate-limited key rests, a refused
key is out until restart. Keys are known by their label (the variable that holds them), which
is all that ever reaches an audit record, a metric or a log line."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

DEFAULT_REST_S = 60.0
# Longest rest a provider's retry-after can impose: a bogus header must not retire a key.
MAX_REST_S = 3600.0
# Statuses that say the key itself is bad (unknown, unpaid, not allowed): out until restart.
KEY_REFUSED = frozenset({401, 402, 403})


@dataclass(slots=True)
class PoolKey:
    label: str
    value: str | None
    resting_until: float = 0.0
    retired: bool = False


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

    def retire(self, key: PoolKey) -> None:
        key.retired = True

    def usable(self) -> bool:
        now = self._clock()
        return any(not k.retired and k.resting_until <= now for k in self.keys)

    def seconds_until_ready(self) -> float | None:
        """When the first resting key is back; None when every key is out until restart."""
        now = self._clock()
        waits = [max(0.0, k.resting_until - now) for k in self.keys if not k.retired]
        return min(waits) if waits else None


def retry_after_s(headers: Mapping[str, str] | object) -> float | None:
    """A provider's ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date), if any."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    milliseconds = get("retry-after-ms")
    if milliseconds:
        try:
            return float(milliseconds) / 1000
        except ValueError:
            pass
    value = get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_after_header(seconds: float) -> str:
    """Whole seconds, rounded up: a client that waits that long finds a key ready."""
    return str(max(1, math.ceil(seconds)))
