"""Streamed answers of a provider of another protocol than the caller's (contract §18), live:
the provider streams, and its stream reaches the caller in the caller's protocol event by
event (``translation/streams.py``), for pass-through and for a mediated request's model calls.
Requests, whole answers and errors cross at ``translated.py``; this module is their stream.

A stream that breaks after text goes on at the route's next target, of any protocol
(``stream_failover.py``): the watch reads what the caller was sent, and the rest is read in
the caller's protocol and spliced in.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

import orjson

from ...codecs import CODECS
from ...codecs.base import Codec
from ...codecs.usage import StreamUsage
from ...mediation.commands import Event
from ...model.errors import ApiError, upstream_failure
from ...translation import Translated, reshaped_tools, translate_request
from ...translation.streams import (
    StreamTranslator,
    TranslatedTurn,
    stream_translator,
    translated_turn,
)
from ...transport import Response, TransportError
from ..accounting.accounting import Call, calls_cost, record_request, stream_usage, with_spent
from ..failover import stream_failover
from ..providers.upstream import UpstreamResponse, UpstreamTarget, translate_error
from . import translated

if TYPE_CHECKING:
    from ..request.exchange import Exchange, RequestContext

_CODECS = {codec.name: codec for codec in CODECS}
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
# What a provider may still send after its stream's end marker before its answer ends (the
# chunked terminator, a trailing comment); past it the connection is closed, not drained.
_MAX_AFTER_END = 64 * 1024
# Provider answer headers that keep their meaning whatever the protocol.
_KEPT_HEADERS = ("x-request-id", "request-id")


def streamed(body: dict[str, Any], protocol: str) -> dict[str, Any]:
    """A translated request asking its provider for a stream; a Chat Completions provider is
    asked for its usage chunk, which the sidecar accounts and a caller may want."""
    body = {**body, "stream": True}
    if protocol == "chat":
        body["stream_options"] = {"include_usage": True}
    return body


def crossing_protocol(ctx: RequestContext, provider: str) -> str | None:
    """The protocol ``provider`` is spoken to in when it is not the caller's; else None."""
    translations = ctx.routing.translations
    if translations is None:
        return None
    return translations.protocol_of(provider, ctx.state.config.providers)


def translator_for(
    ctx: RequestContext,
    caller: Codec,
    translated: Translated | None,
    *,
    usage: StreamUsage | None = None,
) -> StreamTranslator:
    """The translator of the answer to ``translated`` (a request in its target's protocol;
    None: in the caller's own, read and written again alike); ``usage`` reads the provider's
    usage from the stream as it is translated."""
    translations = ctx.routing.translations
    return stream_translator(
        caller.name if translated is None else translated.target,
        caller,
        provider=ctx.ledger.provider_name or "",
        model=ctx.ledger.model,
        include_usage=translations is not None and translations.include_usage,
        reshaped=None if translated is None else reshaped_tools(translated.request),
        watch=None if usage is None else usage.read,
        redact=functools.partial(ctx.state.upstream.redact_text, ctx.ledger.provider_name),
    )


# --- pass-through -----------------------------------------------------------------------------


def passthrough_streamed(
    ctx: RequestContext, target: UpstreamTarget, model: str | None
) -> tuple[UpstreamTarget, bytes] | None:
    """A streaming caller's pass-through to a provider of another protocol: its translated
    request, streamed; None when the caller does not stream or the provider speaks its
    protocol."""
    protocol = crossing_protocol(ctx, target.provider) if ctx.routing.stream else None
    if protocol is None:
        return None
    assert ctx.routing.translations is not None
    provider = ctx.state.config.providers[target.provider]
    body = translated.for_provider(
        ctx.routing.translations.by_protocol[protocol].body, model, provider
    )
    target = translated.retarget(target, protocol, stream=True)
    return target, orjson.dumps(streamed(body, protocol))


def streams_back(ctx: RequestContext, upstream: Response) -> bool:
    """The answer is a stream to translate live (any other answer is translated whole)."""
    return (
        ctx.routing.stream
        and upstream.status == 200
        and upstream.content_type == "text/event-stream"
    )


async def relay_translated_stream(
    exchange: Exchange,
    ctx: RequestContext,
    upstream: Response,
    translated: Translated,
    raw: bytes | bytearray | None,
) -> None:
    """The provider's stream, in the caller's protocol as it arrives; the caller's stream
    always ends with its protocol's end, also when the provider's fails or stops short.
    ``raw``: the caller's request, asked again of the next target when the stream breaks
    after text."""
    relay = _Relay(ctx, upstream, translated)
    kept = {name: upstream.headers[name] for name in _KEPT_HEADERS if name in upstream.headers}
    await exchange.start_stream(200, {**SSE_HEADERS, **kept})
    try:
        await relay.run(exchange, raw)
        await exchange.end()
        error_code = _code(relay.translator)
    except ConnectionError:
        # A client that closes once its answer is complete (SDKs stop at the end) got it.
        error_code = _code(relay.translator) if relay.translator.closed else "client_disconnected"
    except asyncio.CancelledError:
        translator = relay.translator
        code = _code(translator) if translator.closed else "client_disconnected"
        usage, cost = relay.charged()
        recording = record_request(ctx, http_status=200, error_code=code, usage=usage, cost=cost)
        ctx.state.tasks.spawn(recording)
        raise
    finally:
        # Only a stream read to its end marker leaves its connection in a known state.
        relay.upstream.release(reuse=relay.translator.complete)
    usage, cost = relay.charged()
    await record_request(ctx, http_status=200, error_code=error_code, usage=usage, cost=cost)


class _Relay:
    """One translated stream relayed to its caller, and its continuation at the route's next
    target when it breaks after text (a target of any protocol: the caller's own is read by
    a translator of its own protocol, so the caller's lifecycle ends alike)."""

    def __init__(self, ctx: RequestContext, upstream: Response, translated: Translated) -> None:
        self.ctx = ctx
        self.upstream = upstream
        self.usage = StreamUsage(_CODECS[translated.target])  # the provider's, in its sense
        # It reads the events the translator parses that tell usage.
        self.translator = translator_for(ctx, ctx.caller.codec, translated, usage=self.usage)
        self.watch = stream_failover.watch_for(ctx)
        self.splice: stream_failover.Splice | None = None
        self.spent: list[Call] = []  # the stream that broke and was continued

    def charged(self) -> tuple[dict[str, int], float | None]:
        """The usage and cost of the stream and of the one it continued, if any."""
        now = stream_usage(self.ctx, self.usage, self.translator.complete)
        return with_spent(now, self.spent), calls_cost(self.ctx, now, self.spent)

    async def run(self, exchange: Exchange, raw: bytes | bytearray | None) -> None:
        after_end = 0  # bytes read past the caller's end, to let the connection be pooled
        while after_end <= _MAX_AFTER_END:
            translator = self.translator
            if translator.closed and not translator.complete:
                return
            try:
                chunk, cut = await self.upstream.read_chunk(), None
            except TransportError as exc:
                failure = translate_error(exc, self.ctx.ledger.provider_name or "")
                chunk, cut = b"", upstream_failure(failure.kind, failure.message)
            if not chunk and not translator.complete and await self._continued(raw, cut):
                continue
            if cut is not None:
                return await exchange.write(self._spliced(translator.fail(cut)))
            if not chunk:
                return await exchange.write(self._spliced(translator.finish()))
            if translator.closed:
                after_end += len(chunk)
                continue
            self.usage.feed_written(chunk)
            frames = translator.feed(chunk)
            if self.watch is not None:
                self.watch.feed(self.ctx.caller.codec.name, frames)
            if frames := self._spliced(frames):
                await exchange.write(frames)

    def _spliced(self, frames: bytes) -> bytes:
        return frames if self.splice is None or not frames else self.splice.feed(frames)

    async def _continued(self, raw: bytes | bytearray | None, cut: ApiError | None) -> bool:
        """The rest of the answer from the next target, once; False: nothing to continue."""
        watch, self.watch = self.watch, None
        if watch is None or self.translator.closed:
            return False
        ctx = self.ctx
        cause = "upstream_protocol_error" if cut is None else cut.code
        broke = (ctx.ledger.provider_name, ctx.ledger.model, stream_usage(ctx, self.usage, False))
        crossing = LiveCall(ctx, ctx.caller.codec)
        more = await stream_failover.reopen(ctx, watch, raw, cause, crossing)
        if more is None:
            return False
        self.spent.append(broke)
        self.upstream.release(reuse=False)
        spoken = crossing.spoken()
        protocol = ctx.caller.codec.name if spoken is None else spoken.target
        self.upstream, self.usage = more, StreamUsage(_CODECS[protocol])
        self.translator = translator_for(ctx, ctx.caller.codec, spoken, usage=self.usage)
        self.splice = stream_failover.Splice(ctx.caller.codec.name, watch)
        return True


def _code(translator: StreamTranslator) -> str | None:
    return None if translator.failure is None else translator.failure.code


class TranslatedStream:
    """A target's stream read as a stream of the caller's protocol: what its translator
    writes, cut where the target's was cut (its reader tells a cut as it tells one of the
    caller's own protocol). It reads like the response it wraps."""

    __slots__ = ("_after_end", "_ended", "_response", "_translator")

    def __init__(self, response: Response, translator: StreamTranslator) -> None:
        self._response = response
        self._translator = translator
        self._ended = False
        self._after_end = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._response, name)

    async def read_chunk(self) -> bytes:
        translator = self._translator
        while not self._ended:
            chunk = await self._response.read_chunk()
            if not chunk or self._after_end > _MAX_AFTER_END:
                self._ended = True
                return translator.finish() if translator.complete else b""
            if translator.closed:
                self._after_end += len(chunk)
                continue
            if frames := translator.feed(chunk):
                return frames
        return b""

    def release(self, reuse: bool = True) -> None:
        self._response.release(reuse=reuse and self._translator.complete)


# --- a mediated request's model calls ---------------------------------------------------------


class LiveCall:
    """One streamed model call of a mediated request over targets of any protocol: the
    request each target gets, and its answer read as the caller's turn."""

    def __init__(self, ctx: RequestContext, caller: Codec) -> None:
        self._ctx = ctx
        self._caller = caller
        self._spoken: dict[str, Translated] = {}  # provider -> the call in its protocol

    def request(
        self, target: UpstreamTarget, body: dict[str, Any]
    ) -> tuple[UpstreamTarget, bytes] | None:
        """The call (``body`` in the caller's protocol, the model already the target's) for a
        provider of another protocol, streamed; None when it speaks the caller's.
        ``Untranslatable`` when the provider's protocol cannot carry it."""
        protocol = crossing_protocol(self._ctx, target.provider)
        if protocol is None:
            return None
        call = translate_request(body, self._caller.name, protocol)
        self._spoken[target.provider] = call
        provider = self._ctx.state.config.providers[target.provider]
        upstream_body = streamed(translated.for_provider(call.body, None, provider), protocol)
        return translated.retarget(target, protocol, stream=True), orjson.dumps(upstream_body)

    def turn(self) -> TranslatedTurn | None:
        """The answering provider's stream read as the caller's turn; None when it speaks the
        caller's protocol."""
        translated = self._spoken.get(self._ctx.ledger.provider_name or "")
        if translated is None:
            return None
        ctx = self._ctx
        # A failed call is the driver's to tell the client, inside its one lifecycle.
        return translated_turn(
            translated.target,
            self._caller,
            translated.request,
            provider=ctx.ledger.provider_name or "",
            redact=functools.partial(ctx.state.upstream.redact_text, ctx.ledger.provider_name),
        )

    def spoken(self) -> Translated | None:
        """The call as the answering provider got it; None when it speaks the caller's."""
        return self._spoken.get(self._ctx.ledger.provider_name or "")

    def caller_stream(self, response: Response) -> Response:
        """The answering provider's stream read in the caller's protocol (``TranslatedStream``),
        as it came when it speaks it."""
        spoken = self.spoken()
        if spoken is None:
            return response
        translator = translator_for(self._ctx, self._caller, spoken)
        return TranslatedStream(response, translator)  # type: ignore[return-value]

    def whole(self, reply: UpstreamResponse) -> Event:
        """The answering provider's answer that came whole, or its refusal, as the engine's
        event (translated as ``translated.py`` translates whole answers)."""
        answered = self._spoken.get(self._ctx.ledger.provider_name or "")
        return translated.reply_event(self._ctx, reply, answered)
