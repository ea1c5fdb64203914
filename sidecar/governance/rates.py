"""Rate limits of ``tool-rules`` (SPEC §9.2): ``rate: N/second|minute|hour`` per agent and tool.

A token bucket per (agent, tool, rule): it holds up to N calls and refills at N per period, so
a burst of N passes and then calls pass as fast as the rate allows. It is a few lines of
arithmetic on one clock reading, so no library is needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..manifest import Rate


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[tuple[str, str, int], _Bucket] = {}
        self._rates: dict[tuple[str, str, int], Rate] = {}

    def admit(self, agent: str, tool: str, rule: int, rate: Rate) -> bool:
        """Take one call from the bucket; False when it is empty (the call is refused)."""
        now = self._clock()
        key = (agent, tool, rule)
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

    def levels(self) -> dict[tuple[str, str, int], float]:
        """Calls each bucket would admit now, by (agent, tool, rule); for the console. A bucket
        nobody has drawn from yet is absent (it is full)."""
        now = self._clock()
        return {
            key: min(
                float(rate.count),
                self._buckets[key].tokens
                + (now - self._buckets[key].updated) * rate.count / rate.period_s,
            )
            for key, rate in self._rates.items()
        }
