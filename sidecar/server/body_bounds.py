"""What one request body may cost the sidecar (SPEC §6.1, §19; issue 30), checked before it is
parsed:

- ``check_shape``: a body whose items, parsed, could take more than ``max_body_bytes`` is
  refused (413 ``request_too_complex``; the bound is ``model/json_cost.py``'s, counted a
  slice per turn of the event loop). A body let through holds at most itself, its text again
  once parsed, and one body limit of items.
- ``BodyBytesInFlight``: one agent's request bodies being read or served at once are held to
  ``AGENT_BODY_BUDGET`` body limits; past it, 429 (the SDKs back off and retry).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from ..model.errors import ApiError
from ..model.json_cost import costs_over

AGENT_BODY_BUDGET = 2  # body limits' worth of one agent's bodies at once


async def check_shape(raw: bytes | bytearray, limit: int) -> None:
    """Refuse a body whose parsed items could cost more than ``limit`` bytes (413). Counted a
    slice at a time, giving the event loop to other requests in between."""
    for over in costs_over(raw, limit):
        if over:
            raise ApiError(
                413,
                "request_too_complex",
                "the request body holds too many JSON items (messages, blocks, values) for its "
                f"size: parsed, they could take more than {limit} bytes; send fewer, larger "
                "items",
            )
        await asyncio.sleep(0)


class BodyBytesInFlight:
    """Request body bytes each agent has in the sidecar at once."""

    def __init__(self, max_body_bytes: int) -> None:
        self.budget = AGENT_BODY_BUDGET * max_body_bytes
        self._held: Counter[str] = Counter()

    def held(self, agent: str) -> int:
        return self._held[agent]

    def holding(self, agent: str) -> _Holding:
        """While the block runs, the agent's bytes taken with the function it yields (429 past
        the budget) are counted; all are given back at its end."""
        return _Holding(self._held, self.budget, agent)


class _Holding:
    """One request's share of its agent's body bytes (a class, not a generator: every request
    enters one)."""

    __slots__ = ("_agent", "_budget", "_held", "_taken")

    def __init__(self, held: Counter[str], budget: int, agent: str) -> None:
        self._held = held
        self._budget = budget
        self._agent = agent
        self._taken = 0

    def __enter__(self) -> Callable[[int], None]:
        return self.take

    def __exit__(self, *exc: object) -> None:
        held, agent = self._held, self._agent
        held[agent] -= self._taken
        if held[agent] <= 0:
            del held[agent]

    def take(self, size: int) -> None:
        held, agent = self._held, self._agent
        if held[agent] + size > self._budget:
            raise ApiError(
                429,
                "too_many_request_bytes",
                f"this agent already has {held[agent]} request bytes in the sidecar "
                f"(at most {self._budget} at once); retry when its other requests are done",
                "rate_limit_error",
            )
        held[agent] += size
        self._taken += size
