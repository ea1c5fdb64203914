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
from typing import Any

import orjson

from clawpod.sidecar.codecs.base import Codec
from clawpod.sidecar.codecs.streaming import TextDelta
from clawpod.sidecar.mediation.commands import Event, ModelFailed, ModelReplied
from clawpod.sidecar.model.conversation import CodecError, Conversation
from clawpod.sidecar.server.stream_tools import REFUSAL_STATUSES
from clawpod.sidecar.server.unserved import NOT_SERVED, not_served_message
from clawpod.sidecar.server.upstream import (
    UpstreamClient,
    UpstreamError,
    UpstreamTarget,
    translate_error,
)
from clawpod.sidecar.transport import TransportError

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
    upstream: UpstreamClient,
    target: UpstreamTarget,
    codec: Codec,
    conversation: Conversation,
    body: dict[str, Any],
    timeout_s: float,
    show: Show,
    *,
    may_fall_back: bool = False,
) -> Event | StreamUnanswered:
    """Call the model with a streamed answer; ``show`` each piece of text as it arrives.

    ``may_fall_back``: an empty stream, or a status a server refuses streaming with, comes back
    as ``StreamUnanswered`` instead of a failure."""
    try:
        response = await upstream.post_stream(target, codec.streaming_request(body), timeout_s)
    except UpstreamError as exc:
        return ModelFailed(exc.kind, exc.message)
    assembler = codec.stream_assembler()
    try:
        if response.status != 200:
            data = upstream.redact(target.provider, await response.read())
            unserved = not_served_message(codec, target.provider, response.status, data)
            if unserved:
                return ModelFailed(NOT_SERVED, unserved)
            if may_fall_back and response.status in REFUSAL_STATUSES:
                return StreamUnanswered(f"answered {response.status}", definitive=False)
            return ModelFailed(
                "status",
                codec.provider_error_message(data),
                response.status,
                response.headers.get("Retry-After"),
            )
        if response.content_type != "text/event-stream":
            # A provider that answers whole: its text is shown at once.
            reply = orjson.loads(await response.read())
            if not isinstance(reply, dict):
                return ModelFailed("protocol", "the provider's reply is not a JSON object")
            await show_whole(codec, conversation, reply, show)
            return ModelReplied(reply)
        while chunk := await response.read_chunk():
            deltas = assembler.feed(chunk)
            if deltas:
                await show(assembler.head, deltas)
        try:
            return ModelReplied(assembler.finish())
        except CodecError:
            if may_fall_back and assembler.events == 0:
                return StreamUnanswered("answered with an empty stream", definitive=True)
            raise
    except TransportError as exc:
        failure = translate_error(exc, target.provider)
        return ModelFailed(failure.kind, failure.message)
    except _MALFORMED as exc:
        return ModelFailed("protocol", f"the provider's reply is not valid: {exc}")
    finally:
        response.release()


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
