"""The client's side of a mediated request: its stream, its keep-alives and its one answer.

A client that goes away in the middle must cost neither the loop nor its audit: every write
is guarded, and once it has gone nothing more is written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ..codecs.base import Codec
from ..codecs.streaming import ClientStream, TextDelta
from ..mediation.commands import Fail, Respond
from ..model.errors import ApiError
from ..transport.keepalive import with_keepalives
from .errors import FINAL_HEADERS, JSON_HEADERS
from .exchange import Exchange

if TYPE_CHECKING:
    from .context import RequestContext

log = logging.getLogger(__name__)

T = TypeVar("T")
# Status recorded when the client left before the answer (nginx's convention).
CLIENT_CLOSED = 499
# Failures the sidecar decides itself: the same request fails the same way (SPEC 7.2).
SIDECAR_DECIDED = frozenset(
    {
        "mixed_executor_response",
        "tool_budget_exhausted",
        "invalid_request",
        "timeout",
        "protocol_not_served",
    }
)
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


class MediatedClient:
    def __init__(self, exchange: Exchange, ctx: RequestContext, codec: Codec) -> None:
        self.exchange = exchange
        self.ctx = ctx
        self.codec = codec
        self.live: ClientStream | None = None
        """A streaming client's one lifecycle, written across every model call."""
        self._writing = asyncio.Lock()  # keep-alives and text go out whole, one at a time
        self.gone = False

    async def begin_stream(self, live: ClientStream) -> None:
        """Send the 200 text/event-stream headers now."""
        self.live = live
        await self._guard(self.exchange.start_stream(200, SSE_HEADERS))

    async def show(self, head: dict[str, Any], deltas: list[TextDelta]) -> None:
        assert self.live is not None
        await self.write(self.live.text(head, deltas))

    async def keeping_alive(self, work: Awaitable[T]) -> T:
        """Await ``work``; a streaming client gets an SSE comment every few seconds meanwhile."""
        if self.live is None:
            return await work
        return await with_keepalives(work, self.write, self.ctx.state.sse_keepalive_s)

    async def reply(self, command: Respond | Fail, side_effect_happened: bool) -> None:
        """The answer, or the failure in the caller's protocol. A failure the sidecar decided,
        or one after a call with side effects ran, tells the runner not to retry."""
        status, body, headers = 200, b"", JSON_HEADERS
        if isinstance(command, Fail):
            # Messages carry provider text (an error body, a stream's error event): no key in
            # any encoding leaves with them.
            upstream = self.ctx.state.upstream
            message = upstream.redact_text(self.ctx.provider_name, command.message)
            err = ApiError(command.status, command.code, message)
            if self.live is not None:
                await self.write(self.live.fail(err))
            else:
                status, body = command.status, self.codec.error_json(err)
                if command.code in SIDECAR_DECIDED or side_effect_happened:
                    headers = FINAL_HEADERS
                elif command.retry_after:
                    headers = {**JSON_HEADERS, "Retry-After": command.retry_after}
        elif self.live is not None:
            await self.write(self.live.finish(command.body))
        else:
            body = orjson.dumps(command.body)
        if self.live is not None:
            if not self.left():
                await self._guard(self.exchange.end())
        elif not self.left():
            # Send now, so the audit after it never delays the client.
            await self._guard(self.exchange.respond(status, body, headers))

    async def write(self, data: bytes) -> None:
        if self.live is not None and not self.gone and data:
            async with self._writing:
                await self._guard(self.exchange.write(data))

    def left(self) -> bool:
        if not self.gone:
            self.gone = self.exchange.client_gone()
        return self.gone

    async def _guard(self, operation: Awaitable[Any]) -> None:
        """Run a client write; a client that went away must not abort the loop or its audit."""
        try:
            await operation
        except (ConnectionError, RuntimeError) as exc:
            self.gone = True
            log.info("client of %s went away: %s", self.ctx.request_id, exc)
