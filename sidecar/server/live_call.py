"""A model call of a mediated request whose client streams (SPEC §8.1): the upstream streams
too, and each text delta reaches the client as soon as it arrives.

The turn's assembler folds the stream; the text it hands back goes to ``show`` at once, the
assembled body to the engine at the end, which then classifies the turn's calls.

A provider that cannot stream with tools (``server/stream_tools.py``) answers such a request
with an empty stream or an error status; when the caller may fall back, that comes back as
``StreamUnanswered`` (nothing was shown, nothing executed) and the driver calls it whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from clawpod.sidecar.codecs.base import Codec
from clawpod.sidecar.codecs.streaming import TextDelta
from clawpod.sidecar.mediation.commands import Event, ModelFailed, ModelReplied
from clawpod.sidecar.model.conversation import CodecError, Conversation
from clawpod.sidecar.model.errors import ApiError
from clawpod.sidecar.server import translated_stream
from clawpod.sidecar.server.failover import open_upstream
from clawpod.sidecar.server.stream_tools import REFUSAL_STATUSES
from clawpod.sidecar.server.unserved import NOT_SERVED, not_served_message
from clawpod.sidecar.server.upstream import (
    UpstreamError,
    UpstreamResponse,
    UpstreamTarget,
    translate_error,
)
from clawpod.sidecar.translation import Untranslatable
from clawpod.sidecar.transport import Response, TransportError

if TYPE_CHECKING:
    from clawpod.sidecar.server.context import RequestContext

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


async def call_model_streaming(
    ctx: RequestContext,
    codec: Codec,
    conversation: Conversation,
    body: dict[str, Any],
    timeout_s: float,
    show: Show,
    *,
    may_fall_back: bool = False,
) -> Event | StreamUnanswered:
    """Call the model with a streamed answer; ``show`` each piece of text as it arrives. The
    request's targets are tried in turn until one answers (SPEC §14), all before any text
    of this turn is shown.

    ``may_fall_back``: an empty stream, or a status a server refuses streaming with, comes back
    as ``StreamUnanswered`` instead of a failure."""
    upstream = ctx.state.upstream
    streamed = codec.streaming_request(body)
    crossing = translated_stream.LiveCall(ctx, codec)

    def send(target: UpstreamTarget, model: str | None) -> Awaitable[Response]:
        request = streamed
        if model is not None and model != streamed.get("model"):  # a fallback's own id
            request = {**streamed, "model": model}
        # A provider of another protocol gets the call translated, streamed (contract §18).
        target, data = crossing.request(target, request) or (target, orjson.dumps(request))
        return upstream.send(
            target,
            data,
            read_timeout_s=timeout_s,
            max_body_bytes=upstream.max_response_bytes,
        )

    try:
        response = await open_upstream(ctx, send)
    except UpstreamError as exc:
        return ModelFailed(exc.kind, exc.message)
    except ApiError as err:  # every key rests
        return ModelFailed("status", err.message, err.status, err.headers.get("retry-after"))
    except Untranslatable as exc:
        return ModelFailed("status", str(exc), 400)
    provider = ctx.provider_name
    assert provider is not None
    assembler = codec.stream_assembler()
    end = codec.end_watch()
    translator = crossing.translator()  # the provider's stream as the caller's
    try:
        if response.status != 200:
            data = upstream.redact(provider, await response.read())
            unserved = translator is None and not_served_message(
                codec, provider, response.status, data
            )
            if unserved:
                return ModelFailed(NOT_SERVED, unserved)
            if may_fall_back and response.status in REFUSAL_STATUSES:
                return StreamUnanswered(f"answered {response.status}", definitive=False)
            if translator is not None:  # the provider's error, told in the caller's terms
                return crossing.whole(UpstreamResponse(response.status, response.headers, data))
            return ModelFailed(
                "status",
                codec.provider_error_message(data),
                response.status,
                response.headers.get("Retry-After"),
            )
        if response.content_type != "text/event-stream" and translator is not None:
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
        while chunk := await response.read_chunk():
            end.feed(chunk)
            if translator is not None:
                chunk = translator.feed(chunk)
            deltas = assembler.feed(chunk)
            if deltas:
                await show(assembler.head, deltas)
            if translator is not None and translator.failure is not None:
                break
        if translator is not None:
            failed = translated_stream.finish_crossing(translator, assembler)
            if failed is not None:
                return failed
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
        whole = end.seen if translator is None else translator.complete
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
