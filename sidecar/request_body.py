"""An inbound request's body: read into one buffer, and what it may cost the sidecar (SPEC
§6.1, §19; issue 30), bounded before it is parsed.

- ``read_body_once``: aiohttp's ``Request.read`` gathers the chunks and then joins them: twice
  the body at its peak. Sized once from Content-Length (else grown as chunks come), the body
  is held once; one that arrived whole before it is read is the parser's own buffer.
- ``BodyBytesInFlight``: one agent's request bodies being read or served at once are held to
  ``AGENT_BODY_BUDGET`` body limits; past it, 429 (the SDKs back off and retry).
- ``check_shape``: a body whose items, parsed, could take more than ``max_body_bytes`` is
  refused (413 ``request_too_complex``; the bound is ``model/json_cost.py``'s, counted a
  slice per turn of the event loop). A body let through holds at most itself, its text again
  once parsed, and one body limit of items.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from aiohttp import web

from .model.errors import ApiError
from .model.json_cost import COUNT_FROM_SHARE, costs_over

AGENT_BODY_BUDGET = 2  # body limits' worth of one agent's bodies at once


def no_accounting(size: int) -> None:
    """A ``take`` that accounts nothing."""


async def read_body_once(
    request: web.Request, limit: int, take: Callable[[int], None] = no_accounting
) -> bytes | bytearray | None:
    """The whole body, or None when it is over ``limit`` bytes. ``take`` is told each size of
    memory the body is given before it is (it may refuse by raising)."""
    length = request.content_length
    if length is not None and length > limit:
        return None
    if length is not None:
        take(length)
        content = request.content
        if content.is_eof():  # it all came with the head (most bodies): taken as it lies
            return content.read_nowait()
        body = bytearray(length)
        view = memoryview(body)
        filled = 0
        async for chunk in request.content.iter_any():
            view[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
        view.release()
        return body
    body = bytearray()
    async for chunk in request.content.iter_any():
        if len(body) + len(chunk) > limit:
            return None
        take(len(chunk))
        body += chunk
    return body


async def check_shape(raw: bytes | bytearray, limit: int) -> None:
    """Refuse a body whose parsed items could cost more than ``limit`` bytes (413). Counted a
    slice at a time, giving the event loop to other requests in between."""
    if len(raw) < limit // COUNT_FROM_SHARE:
        return  # too short to hold a limit's worth of items (``costs_over`` counts none)
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
