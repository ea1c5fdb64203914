"""The HTTP client under the MCP SDK, bounded in what a service's answer can make the sidecar
hold (issue 30): the SDK reads a JSON answer whole (``aread``) and an SSE event up to a size of
its own, so a 150 MB ``tools/call`` result was read into memory before it was truncated.

Every response body is counted as it arrives, per JSON body or SSE event (bytes since the last
blank line): past the bound in force, reading stops with ``AnswerTooLarge`` (an ``httpx``
stream error, which the SDK turns into a failed request) and the bound records that it was
exceeded. The bound in force is a context variable: the SDK sends each request in a task run in
its caller's context, so a ``tools/call`` is held to its own result limit (``bounded``) and
anything else (the handshake, listing pages) to ``DEFAULT_ANSWER_BYTES``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the SDK's HTTP library is imported with the SDK (see mcp_backend.py)
    import httpx2

# One answer that is not a tool result (initialize, one page of tools/list): generous for any
# real tool list, far below what could hurt the process.
DEFAULT_ANSWER_BYTES = 8 * 1024 * 1024
# Beyond a result's own limit: its JSON-RPC envelope, the escaping of a JSON text inside a text
# block, and ``structuredContent`` sent with its text twin (the MCP spec asks for both).
RESULT_MARGIN_FACTOR = 2
RESULT_MARGIN_BYTES = 64 * 1024
_EVENT_ENDS = (b"\n\n", b"\r\n\r\n")


def result_bound(max_result_bytes: int) -> int:
    """Bytes one ``tools/call`` answer may take on the wire for a result of at most
    ``max_result_bytes`` once truncated."""
    return RESULT_MARGIN_FACTOR * max_result_bytes + RESULT_MARGIN_BYTES


@dataclass(slots=True)
class AnswerBound:
    limit: int
    exceeded: bool = False
    read: int = 0
    """Bytes of the answers read under it, all told."""


_BOUND: ContextVar[AnswerBound | None] = ContextVar("mcp_answer_bound", default=None)


@contextlib.contextmanager
def bounded(limit: int) -> Iterator[AnswerBound]:
    """Hold the answers to requests sent in this block to ``limit`` bytes each."""
    bound = AnswerBound(limit)
    token = _BOUND.set(bound)
    try:
        yield bound
    finally:
        _BOUND.reset(token)


def _after_last_event(chunk: bytes, pending: int) -> int:
    """Bytes of the event still open after ``chunk``, ``pending`` being those before it."""
    cut = -1
    for end in _EVENT_ENDS:
        at = chunk.rfind(end)
        if at >= 0:
            cut = max(cut, at + len(end))
    return pending + len(chunk) if cut < 0 else len(chunk) - cut


def bounded_transport() -> httpx2.AsyncBaseTransport:
    """A transport for the SDK's ``httpx2.AsyncClient`` that applies the bound in force."""
    import httpx2

    class AnswerTooLarge(httpx2.StreamError):
        """An answer (a JSON body or one SSE event) larger than the bound in force."""

    class _CountedStream(httpx2.AsyncByteStream):
        def __init__(self, inner: httpx2.AsyncByteStream, bound: AnswerBound) -> None:
            self._inner = inner
            self._bound = bound

        async def __aiter__(self) -> AsyncIterator[bytes]:
            # Bytes since the last event boundary (a JSON body has none). A boundary split
            # across two reads is not seen: two events then count as one, never less.
            pending = 0
            async for chunk in self._inner:
                self._bound.read += len(chunk)
                pending = _after_last_event(chunk, pending)
                if pending > self._bound.limit:
                    self._bound.exceeded = True
                    raise AnswerTooLarge(f"the answer is larger than {self._bound.limit} bytes")
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    class _BoundedTransport(httpx2.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            response = await super().handle_async_request(request)
            bound = _BOUND.get() or AnswerBound(DEFAULT_ANSWER_BYTES)
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _CountedStream(response.stream, bound)
            return response

    return _BoundedTransport(trust_env=False)
