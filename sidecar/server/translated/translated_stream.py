"""Streamed answers of a provider of another protocol than the caller's (contract §18), live:
the provider streams, and its stream reaches the caller in the caller's protocol event by
event (``translation/streams.py``), for pass-through and for a mediated request's model calls.
Requests, whole answers and errors cross at ``translated.py``; this module is their stream.
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
from ...model.errors import upstream_failure
from ...translation import Translated, reshaped_tools, translate_request
from ...translation.streams import (
    StreamTranslator,
    TranslatedTurn,
    stream_translator,
    translated_turn,
)
from ...transport import Response, TransportError
from ..accounting.accounting import record_request, stream_usage
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
    translated: Translated,
    *,
    usage: StreamUsage | None = None,
) -> StreamTranslator:
    """The translator of the answer to ``translated`` (a request in its target's protocol);
    ``usage`` reads the provider's usage from the stream as it is translated."""
    translations = ctx.routing.translations
    return stream_translator(
        translated.target,
        caller,
        provider=ctx.ledger.provider_name or "",
        model=ctx.ledger.model,
        include_usage=translations is not None and translations.include_usage,
        reshaped=reshaped_tools(translated.request),
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
    exchange: Exchange, ctx: RequestContext, upstream: Response, translated: Translated
) -> None:
    """The provider's stream, in the caller's protocol as it arrives; the caller's stream
    always ends with its protocol's end, also when the provider's fails or stops short."""
    usage = StreamUsage(_CODECS[translated.target])  # the provider's counts, in its own sense
    # It reads the events the translator parses that tell usage.
    translator = translator_for(ctx, ctx.caller.codec, translated, usage=usage)
    kept = {name: upstream.headers[name] for name in _KEPT_HEADERS if name in upstream.headers}
    await exchange.start_stream(200, {**SSE_HEADERS, **kept})
    try:
        await _relay(exchange, ctx, upstream, translator, usage)
        await exchange.end()
        error_code = _code(translator)
    except ConnectionError:
        # A client that closes once its answer is complete (SDKs stop at the end) got it.
        error_code = _code(translator) if translator.closed else "client_disconnected"
    except asyncio.CancelledError:
        code = _code(translator) if translator.closed else "client_disconnected"
        charged = _charged(ctx, usage, translator)
        ctx.state.tasks.spawn(record_request(ctx, http_status=200, error_code=code, usage=charged))
        raise
    finally:
        # Only a stream read to its end marker leaves its connection in a known state.
        upstream.release(reuse=translator.complete)
    charged = _charged(ctx, usage, translator)
    await record_request(ctx, http_status=200, error_code=error_code, usage=charged)


def _charged(
    ctx: RequestContext, usage: StreamUsage, translator: StreamTranslator
) -> dict[str, int]:
    """The stream's usage; where the provider told none, estimated from what its model wrote."""
    return stream_usage(ctx, usage, translator.complete)


def _code(translator: StreamTranslator) -> str | None:
    return None if translator.failure is None else translator.failure.code


async def _relay(
    exchange: Exchange,
    ctx: RequestContext,
    upstream: Response,
    translator: StreamTranslator,
    usage: StreamUsage,
) -> None:
    after_end = 0  # bytes read past the caller's end, to let the connection be pooled
    while after_end <= _MAX_AFTER_END and not (translator.closed and not translator.complete):
        try:
            chunk = await upstream.read_chunk()
        except TransportError as exc:
            failure = translate_error(exc, ctx.ledger.provider_name or "")
            await exchange.write(translator.fail(upstream_failure(failure.kind, failure.message)))
            return
        if not chunk:
            await exchange.write(translator.finish())
            return
        if translator.closed:
            after_end += len(chunk)
            continue
        usage.feed_written(chunk)
        frames = translator.feed(chunk)
        if frames:
            await exchange.write(frames)


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

    def whole(self, reply: UpstreamResponse) -> Event:
        """The answering provider's answer that came whole, or its refusal, as the engine's
        event (translated as ``translated.py`` translates whole answers)."""
        answered = self._spoken.get(self._ctx.ledger.provider_name or "")
        return translated.reply_event(self._ctx, reply, answered)
