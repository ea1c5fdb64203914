"""Rate limits of ``tool-rules`` (SPEC §9.2): ``rate: N/second|minute|hour`` per agent and tool.

A token bucket per (agent, tool, rule), kept by the pod's counters (``state/counters.py``:
this sidecar's memory, or the shared store every sidecar of the pod counts in, SPEC §24).
"""

from __future__ import annotations

from ..manifest import Rate
from ..state.counters import RateBuckets, RateCounters, RateKey


class RateLimiter:
    def __init__(self, counters: RateCounters | None = None) -> None:
        self.counters: RateCounters = counters or RateBuckets()

    async def admit(self, agent: str, tool: str, rule: int, rate: Rate) -> bool:
        """Take one call from the bucket; False when it is empty (the call is refused).
        Raises ``SharedLimitsUnavailable``."""
        return await self.counters.take((agent, tool, rule), rate)

    def levels(self) -> dict[RateKey, float]:
        """Calls each bucket would admit now, by (agent, tool, rule); for the console. A bucket
        nobody has drawn from yet is absent (it is full)."""
        return self.counters.levels()
