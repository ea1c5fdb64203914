"""What one request body may cost the sidecar (SPEC §6.1, §19; issue 30): a body's size is
bounded by ``max_body_bytes``, but parsed JSON costs per item (a dict ~230 bytes, a string ~60,
a float 32), so 31 MB of tiny messages became +350 MB and seconds of event loop.

Two bounds, both checked before anything is parsed:

- ``check_shape``: a body over ``SCAN_FROM`` is refused (413 ``request_too_complex``) when
  the items its punctuation allows would cost more than ``max_body_bytes`` once parsed. The
  estimate counts bytes in C (``bytes.count``), never items in Python; it is an upper bound
  (punctuation inside strings counts too), so a body it lets through holds at most the body
  plus one body limit of parsed items. Smaller bodies cannot reach that and are not scanned.
- ``BodyBytesInFlight``: one agent's request bodies being read or served at once are held to
  ``AGENT_BODY_BUDGET`` body limits; past it, 429 (the SDKs back off and retry).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from clawpod.sidecar.model.errors import ApiError

# Bytes a parsed item may take at most, by the character that announces it (CPython 3.11,
# 64-bit): '{' an empty dict, ':' a member's share of its dict, '[' an empty list, a string
# (two '"') its object, ',' the pointer and a float it may add. The shortest body of each kind
# ("[{},{}", '{"a":1', '["",""', "[1.5,") costs less parsed than these sum to.
_OBJECT_BYTES = 64
_MEMBER_BYTES = 48
_LIST_BYTES = 56
_STRING_BYTES = 56
_COMMA_BYTES = 32
# Bodies below this share of the limit cannot hold a limit's worth of items: not scanned.
SCAN_FROM_SHARE = 32
SCAN_SLICE = 1024 * 1024  # bytes counted between two turns of the event loop
AGENT_BODY_BUDGET = 2  # body limits' worth of one agent's bodies at once


def parsed_cost_bound(raw: bytes | bytearray, start: int = 0, end: int | None = None) -> int:
    """An upper bound, in bytes, of the memory the items of JSON text ``raw[start:end]`` take
    parsed (a quote escaped across ``end`` counts as two halves: more, never less)."""
    strings = (raw.count(b'"', start, end) - raw.count(b'\\"', start, end)) // 2
    return (
        _OBJECT_BYTES * raw.count(b"{", start, end)
        + _MEMBER_BYTES * raw.count(b":", start, end)
        + _LIST_BYTES * raw.count(b"[", start, end)
        + _STRING_BYTES * strings
        + _COMMA_BYTES * raw.count(b",", start, end)
    )


async def check_shape(raw: bytes | bytearray, limit: int) -> None:
    """Refuse a body whose parsed items could cost more than ``limit`` bytes (413). Counted a
    slice at a time, giving the event loop to other requests in between."""
    if len(raw) < limit // SCAN_FROM_SHARE:
        return
    cost = 0
    for start in range(0, len(raw), SCAN_SLICE):
        cost += parsed_cost_bound(raw, start, start + SCAN_SLICE)
        if cost > limit:
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

    @contextmanager
    def holding(self, agent: str) -> Iterator[Callable[[int], None]]:
        """While the block runs, the agent's bytes taken with the function it yields (429 past
        the budget) are counted; all are given back at its end."""
        taken = 0

        def take(size: int) -> None:
            nonlocal taken
            if self._held[agent] + size > self.budget:
                raise ApiError(
                    429,
                    "too_many_request_bytes",
                    f"this agent already has {self._held[agent]} request bytes in the sidecar "
                    f"(at most {self.budget} at once); retry when its other requests are done",
                    "rate_limit_error",
                )
            self._held[agent] += size
            taken += size

        try:
            yield take
        finally:
            self._held[agent] -= taken
            if self._held[agent] <= 0:
                del self._held[agent]
