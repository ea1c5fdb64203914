"""One model call of a mediated request, whole or streamed (SPEC §8.1, §14).

:func:`call_model` is the only way the driver asks the model. A client that does not stream
gets a whole call. A client that streams gets a streamed call: each text delta reaches it
(``show``) as soon as it arrives, the turn's assembler folds the rest and the engine classifies
the turn's calls at the end. A provider that cannot stream with tools
(``server/providers/stream_tools.py``) answers such a request with an empty stream or an error
status; when the setting lets it, that round is asked again whole (nothing was shown, nothing
executed) and its text re-streamed.

Either way the request's targets are tried in turn until one answers
(``server/failover/failover.py``), all before any text of this turn is shown (a stream that
breaks after text, before any tool call, goes on at the next target:
``server/failover/stream_failover.py``), and an answer saying the provider has no route for
the protocol becomes the refusal of ``server/providers/unserved.py``.
``codec`` is the protocol spoken to the upstream, a parameter of each call.

The client's side of those calls (:class:`MediatedClient`): its stream, its keep-alives and
its one answer. A client that goes away in the middle must cost neither the loop nor its
audit: every write is guarded, and once it has gone nothing more is written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ...codecs.base import Codec
from ...codecs.streaming import ClientStream, TextDelta, TurnAssembler
from ...mediation.commands import CallModel, Event, Fail, ModelFailed, ModelReplied, Respond
from ...model.conversation import CodecError, Conversation
from ...model.errors import ApiError
from ...observability import tracing
from ...state.stored_objects import refs
from ...transport import Response, TransportError
from ...transport.keepalive import with_keepalives
from ..accounting.accounting import ModelCharges
from ..failover.failover import open_upstream
from ..failover.stream_failover import ContinuedStream, is_stream, may_continue
from ..providers.stream_tools import REFUSAL_STATUSES
from ..providers.unserved import NOT_SERVED, not_served_message
from ..providers.upstream import UpstreamResponse, UpstreamTarget, translate_error
from ..request.errors import FINAL_HEADERS, JSON_HEADERS
from ..request.exchange import Exchange
from ..translated import translated, translated_stream

if TYPE_CHECKING:
    from ...mediation.engine import MediationEngine
    from ..request.exchange import RequestContext

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
        self.estimated: tuple[int, int] = (0, 0)
        """Input and output tokens estimated for the model calls whose provider counted none
        (``ModelCharges``): the usage a streaming client that asked for it is told."""

    def _with_usage(self, body: dict[str, Any]) -> dict[str, Any]:
        """The answer with the estimated usage where its provider counted none: a Chat
        client that asked for ``include_usage`` gets its usage chunk from it."""
        codec = self.codec
        if not any(self.estimated) or any(codec.usage_counts(body.get("usage"))):
            return body
        usage = {codec.input_key: self.estimated[0], codec.output_key: self.estimated[1]}
        if codec.api == "openai":
            usage["total_tokens"] = sum(self.estimated)
        return {**body, "usage": usage}

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
            message = upstream.redact_text(self.ctx.ledger.provider_name, command.message)
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
            await self.write(self.live.finish(self._with_usage(command.body)))
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
            log.info("client of %s went away: %s", self.ctx.caller.request_id, exc)


E = TypeVar("E")
Show = Callable[[dict[str, Any], list[TextDelta]], Awaitable[None]]
# What a malformed stream or body raises while it is folded.
_MALFORMED = (ValueError, KeyError, TypeError, IndexError, AttributeError)


@dataclass(frozen=True, slots=True)
class StreamUnanswered:
    """A streamed request offering tools that the provider did not answer as a stream."""

    why: str
    definitive: bool
    """An empty stream says the provider cannot; an error status may have other causes, so
    it counts only when the same call answers whole."""


class ModelCalls:
    """The model calls of one mediated request as its driver asks them: each called (whole, or
    streamed to a streaming client, whose turn then ends), the objects the provider stored for
    it noted, its cost charged."""

    def __init__(
        self, ctx: RequestContext, engine: MediationEngine, client: MediatedClient
    ) -> None:
        self.ctx = ctx
        self.engine = engine
        self.client = client
        self.charges = ModelCharges()

    async def __call__(self, command: CallModel) -> Event:
        ctx, codec, live = self.ctx, self.ctx.caller.codec, self.client.live
        show = self.client.show if live is not None else None
        event = await call_model(ctx, codec, self.engine.conversation, command, show)
        if isinstance(event, ModelReplied):
            if live is not None:
                await self.client.write(live.end_turn(event.body))
            if stored := codec.stored_ids(event.body):
                ctx.record_objects(refs(stored))
            self.charges.charge(ctx, codec, command.body, event.body)
            self.client.estimated = self.charges.estimated
        return event


async def call_model(
    ctx: RequestContext,
    codec: Codec,
    conversation: Conversation,
    command: CallModel,
    show: Show | None = None,
) -> Event:
    """Ask the model ``command.body`` in ``codec``'s protocol; with ``show``, streamed, each
    piece of text shown as it arrives."""
    if show is None:
        return await _traced(ctx, codec, _whole(ctx, codec, command))
    support = ctx.state.stream_tools
    provider = ctx.ledger.provider_name
    assert provider is not None
    unanswered: StreamUnanswered | None = None
    if support.streams(provider, command.body):
        may_fall_back = support.may_fall_back(provider, command.body)
        streamed = _streamed(ctx, codec, conversation, command, show, may_fall_back)
        event = await _traced(ctx, codec, streamed)
        if not isinstance(event, StreamUnanswered):
            return event
        unanswered = event  # nothing was shown and no call was made: asked again, whole
    event = await _traced(ctx, codec, _whole(ctx, codec, command))
    if isinstance(event, ModelReplied):
        await show_whole(codec, conversation, event.body, show)
    if unanswered is not None and (unanswered.definitive or isinstance(event, ModelReplied)):
        lesson = support.learn_cannot(provider, command.body, unanswered.why)
        ctx.ledger.audit_extra = {**(ctx.ledger.audit_extra or {}), "stream_tools": lesson}
    return event


async def _traced(ctx: RequestContext, codec: Codec, calling: Awaitable[E]) -> E:
    """The call's upstream latency, and its span when tracing is on."""
    started = time.perf_counter()
    try:
        if tracing.tracer is None:
            return await calling
        with tracing.model_span(codec.api, ctx.ledger.model) as span:
            event = await calling
            if isinstance(event, ModelReplied):
                tracing.record_usage(span, *codec.usage_of_body(event.body))
            elif isinstance(event, ModelFailed):
                status = event.status
                tracing.record_error(span, event.kind if status is None else str(status))
            return event
    finally:
        ctx.state.metrics.observe_upstream(ctx.ledger.provider_name, time.perf_counter() - started)


async def _open(
    ctx: RequestContext,
    body: dict[str, Any],
    crossing: translated_stream.LiveCall | None = None,
    **bound: float,
) -> Response | ModelFailed:
    """The first usable answer among the request's targets (``bound``: the send's timeout);
    ``crossing``: a streamed call that a target of another protocol gets translated."""
    upstream = ctx.state.upstream

    def send(target: UpstreamTarget, model: str | None) -> Awaitable[Response]:
        request = body
        if model is not None and model != body.get("model"):  # a fallback's own id
            request = {**body, "model": model}
        crossed = crossing.request(target, request) if crossing is not None else None
        target, payload = crossed or (target, orjson.dumps(request))
        return upstream.send(target, payload, max_body_bytes=upstream.max_response_bytes, **bound)

    try:
        if not ctx.routing.walks:  # the plain path of ``open_upstream``, without entering it
            return await send(ctx.target(ctx.ledger.provider_name or ""), ctx.ledger.model)
        return await open_upstream(ctx, send)
    except translated.CALL_FAILURES as exc:
        return translated.model_failure(exc)


def _refusal(ctx: RequestContext, codec: Codec, response: Response, data: bytes) -> ModelFailed:
    """A provider's error answer: the protocol it does not serve, or its own error."""
    provider = ctx.ledger.provider_name
    assert provider is not None
    unserved = not_served_message(codec, provider, response.status, data)
    if unserved:
        return ModelFailed(NOT_SERVED, unserved)
    message = codec.provider_error_message(data)
    return ModelFailed("status", message, response.status, response.headers.get("Retry-After"))


async def _whole(ctx: RequestContext, codec: Codec, command: CallModel) -> Event:
    if ctx.routing.translations is not None:  # a target of another protocol (contract §18)
        return await translated.call_model(ctx, command)
    response = await _open(ctx, command.body, timeout_s=command.timeout_s)
    if isinstance(response, ModelFailed):
        return response
    try:
        data = await response.read()
    except TransportError as exc:
        failure = translate_error(exc, ctx.ledger.provider_name)
        return ModelFailed(failure.kind, failure.message)
    finally:
        response.release()
    if response.status != 200:
        return _refusal(
            ctx, codec, response, ctx.state.upstream.redact(ctx.ledger.provider_name, data)
        )
    try:
        if "text/event-stream" in response.headers.get("Content-Type", ""):
            reply = codec.assemble_stream(data)
        else:
            reply = orjson.loads(data)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        return ModelFailed("protocol", f"the provider's reply is not valid: {exc}")
    if not isinstance(reply, dict):
        return ModelFailed("protocol", "the provider's reply is not a JSON object")
    return ModelReplied(reply)


async def _streamed(
    ctx: RequestContext,
    codec: Codec,
    conversation: Conversation,
    command: CallModel,
    show: Show,
    may_fall_back: bool,
) -> Event | StreamUnanswered:
    """``may_fall_back``: an empty stream, or a status a server refuses streaming with, comes
    back as ``StreamUnanswered`` instead of a failure."""
    streamed = codec.streaming_request(command.body)
    # A target of another protocol (§18); none without translations.
    crossing = (
        translated_stream.LiveCall(ctx, codec) if ctx.routing.translations is not None else None
    )
    response = await _open(ctx, streamed, crossing, read_timeout_s=command.timeout_s)
    if isinstance(response, ModelFailed):
        return response
    provider = ctx.ledger.provider_name
    # The provider's stream read as the caller's turn, translated when it speaks another.
    crossed = crossing.turn() if crossing is not None else None
    if crossed is not None and is_stream(response) and may_continue(ctx):
        # One the next target may continue: read as a stream of the caller's own protocol.
        response, crossed = crossing.caller_stream(response), None  # type: ignore[union-attr]
    assembler: TurnAssembler | translated_stream.TranslatedTurn = (
        codec.stream_assembler() if crossed is None else crossed
    )
    end = codec.end_watch()
    reader: ContinuedStream | None = None
    try:
        if response.status != 200:
            data = ctx.state.upstream.redact(provider, await response.read())
            if crossed is not None:  # the provider's error, told in the caller's terms
                if may_fall_back and response.status in REFUSAL_STATUSES:
                    return StreamUnanswered(f"answered {response.status}", definitive=False)
                return crossing.whole(UpstreamResponse(response.status, response.headers, data))
            refusal = _refusal(ctx, codec, response, data)
            if may_fall_back and response.status in REFUSAL_STATUSES and refusal.kind != NOT_SERVED:
                return StreamUnanswered(f"answered {response.status}", definitive=False)
            return refusal
        if response.content_type != "text/event-stream" and crossed is not None:
            answered = crossing.whole(
                UpstreamResponse(200, response.headers, await response.read())
            )
            if isinstance(answered, ModelReplied):
                await show_whole(codec, conversation, answered.body, show)
            return answered
        if response.content_type != "text/event-stream":
            # A provider that answers whole: its text is shown at once.
            reply = orjson.loads(await response.read())
            if not isinstance(reply, dict):
                return ModelFailed("protocol", "the provider's reply is not a JSON object")
            await show_whole(codec, conversation, reply, show)
            return ModelReplied(reply)
        # A stream that breaks after text goes on at the next target.
        if crossed is None:
            reader = ContinuedStream(ctx, codec, response, streamed, crossing)
        while chunk := await (reader or response).read_chunk():
            end.feed(chunk)
            deltas = assembler.feed(chunk)
            if deltas:
                await show(assembler.head, deltas)
            if crossed is not None and crossed.failed:
                break
        if crossed is not None and (failure := crossed.end()) is not None:
            return ModelFailed("protocol", failure.message)
        try:
            return ModelReplied(assembler.finish())
        except CodecError:
            if may_fall_back and assembler.events == 0:
                return StreamUnanswered("answered with an empty stream", definitive=True)
            raise
    except TransportError as exc:
        failure = translate_error(exc, provider)
        return ModelFailed(failure.kind, failure.message)
    except _MALFORMED as exc:
        return ModelFailed("protocol", f"the provider's reply is not valid: {exc}")
    finally:
        # A stream without its end marker leaves the connection's state unknown: not pooled.
        whole = end.seen if crossed is None else crossed.complete
        response = reader.response if reader is not None else response
        response.release(reuse=whole or response.content_type != "text/event-stream")


async def show_whole(
    codec: Codec, conversation: Conversation, reply: dict[str, Any], show: Show
) -> None:
    """The text of a whole answer, read as if it had streamed (the engine judges the rest)."""
    assembler = codec.stream_assembler()
    try:
        deltas = assembler.feed(b"".join(codec.render_stream(conversation, reply)))
    except _MALFORMED:
        return  # not an answer of the protocol's shape: the engine says so
    if deltas:
        await show(assembler.head, deltas)
