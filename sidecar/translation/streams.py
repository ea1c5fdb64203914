"""Stream translation (contract §18), sans-IO: a target's SSE stream, fed in pieces of any
size as they arrive, comes out as the caller's SSE stream, event by event.

A reader per protocol (``stream_readers.py``) turns the target's events into stream events
(``stream_events.py``); a writer per protocol (``stream_writers.py``) writes those in the
caller's protocol. Three readers and three writers make the six directions. Whatever the
target does — a malformed event, an event past the size bound, a failure event, a stream that
stops before its end marker — the caller gets a well-formed stream that ends with its
protocol's error and end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..codecs.base import Codec
from ..codecs.streaming import TextDelta
from ..model.errors import ApiError
from .ir import FunctionTool
from .stream_events import Ended, Failed, Started, Stopped, StreamEvent, Told
from .stream_readers import (
    ChatStreamReader,
    MessagesStreamReader,
    ResponsesStreamReader,
    StreamReader,
)
from .stream_writers import (
    ChatStreamWriter,
    MessagesStreamWriter,
    ResponsesStreamWriter,
    StreamWriter,
)

MAX_EVENT_BYTES = 8 << 20
"""The most one event may take before it completes: a call's whole arguments in one event
(Ollama sends calls whole) stay far below it; past it, a stream is taken for hostile."""

_READERS: dict[str, type[StreamReader]] = {
    "chat": ChatStreamReader,
    "messages": MessagesStreamReader,
    "responses": ResponsesStreamReader,
}


class StreamTranslator:
    """One target stream translated for one caller. ``feed`` each piece as it arrives, then
    ``finish`` at the stream's end, or ``fail`` when reading it failed; each returns the
    caller's bytes to send now."""

    def __init__(
        self,
        reader: StreamReader,
        writer: StreamWriter,
        provider: str,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._provider = provider
        self._redact = redact
        self._unfinished = 0  # bytes fed since the last complete event

    @property
    def complete(self) -> bool:
        """The target stream carried its end (its connection may be pooled again)."""
        return self._reader.ended

    @property
    def said_nothing(self) -> bool:
        """The target stream carried no event at all (a server that cannot stream this)."""
        return self._reader.events == 0

    @property
    def events(self) -> int:
        """The SSE events the target stream carried so far."""
        return self._reader.events

    @property
    def failure(self) -> ApiError | None:
        """The error the caller's stream ended with, if it failed."""
        return self._writer.failure

    @property
    def closed(self) -> bool:
        """The caller's stream has its end: nothing more will be written."""
        return self._writer.closed

    def feed(self, data: bytes) -> bytes:
        """The caller's bytes for the target's ``data``: each event it completes, parsed whole
        and written in the caller's protocol."""
        if self._writer.closed:
            return b""
        events = self._reader.feed(data)
        self._unfinished = 0 if events else self._unfinished + len(data)
        frames = self._writer.write(self._told(events) if self._reader.ended else events)
        if self._reader.malformed is not None:
            return frames + self._writer.fail(self._malformed(self._reader.malformed))
        if self._unfinished > MAX_EVENT_BYTES:
            why = f"an event exceeds {MAX_EVENT_BYTES} bytes"
            return frames + self._writer.fail(self._malformed(why))
        return frames

    def finish(self) -> bytes:
        """The target stream ended: what its end completes, and the caller's error and end if
        it stopped before its end marker."""
        frames = b""
        if not self._writer.closed:
            finished = self._reader.finish()
            frames += self._writer.write(self._told(finished) if self._reader.ended else finished)
        if not self._writer.closed and self._reader.malformed is not None:
            frames += self._writer.fail(self._malformed(self._reader.malformed))
        if not self._writer.closed:
            message = f"provider {self._provider!r} ended the stream before its end"
            frames += self._writer.fail(ApiError(502, "upstream_protocol_error", message))
        return frames

    def _told(self, events: list[StreamEvent]) -> list[StreamEvent]:
        """``events`` (the last the stream had) with the provider's failure (it ends them)
        told without its key: a provider may echo the key it was sent in its error's message;
        an end with nothing before it (a Chat stream of only ``data: [DONE]``) is a failure,
        the 502 a provider of the caller's protocol gets for it."""
        if (
            not self._writer.opened  # it opens with the answer's first content
            and any(type(event) is Ended for event in events)
            and all(type(event) in _NO_ANSWER for event in events)
        ):
            empty = self._malformed("it carried no answer")
            return [Failed(empty.code, empty.message, "upstream_error")]
        failure = events[-1] if events and self._redact is not None else None
        if type(failure) is Failed and self._redact is not None:
            redact = self._redact
            events[-1] = Failed(redact(failure.code), redact(failure.message), failure.type)
        return events

    def fail(self, err: ApiError) -> bytes:
        """Reading the target failed (a timeout, a reset): the caller's error and end."""
        return self._writer.fail(err)

    def _malformed(self, why: str) -> ApiError:
        message = f"provider {self._provider!r} sent a stream that is not valid: {why}"
        return ApiError(502, "upstream_protocol_error", message)


# Events that carry no answer: a Chat ``[DONE]`` alone reads as a stop and an end.
_NO_ANSWER = frozenset({Started, Stopped, Told, Ended})


def stream_translator(
    target: str,
    caller: Codec,
    *,
    provider: str,
    model: str | None,
    include_usage: bool,
    tells: bool = True,
    reshaped: dict[str, FunctionTool] | None = None,
    watch: Callable[[dict[str, Any]], None] | None = None,
    redact: Callable[[str], str] | None = None,
) -> StreamTranslator:
    """A translator from a stream of the ``target`` protocol (``chat``, ``messages``,
    ``responses``) to ``caller``'s. ``model``: the model the caller asked for, shown until the
    target names its own; ``include_usage``: a Chat Completions caller asked for the usage
    chunk; ``tells``: see ``StreamWriter.tells``; ``reshaped``: the Responses caller's custom
    and namespaced tools (``ResponsesStreamWriter``); ``watch``: sees each event the reader
    parses (``StreamReader.watch``); ``redact``: removes the provider's key from the failure
    it reports in the stream."""
    writer: StreamWriter
    if caller.name == "chat":
        writer = ChatStreamWriter(model, include_usage=include_usage, error_body=caller.error_body)
    elif caller.name == "messages":
        writer = MessagesStreamWriter(model, error_body=caller.error_body)
    else:
        writer = ResponsesStreamWriter(model, reshaped)
    writer.tells = tells
    reader = _READERS[target]()
    reader.watch = watch
    return StreamTranslator(reader, writer, provider, redact)


class TranslatedTurn:
    """One streamed model call of a mediated request answered in another protocol, read as the
    caller's turn: the text deltas it shows as they come, its end, and the whole turn in the
    caller's protocol (what the caller's ``TurnAssembler`` gives for its own protocol)."""

    def __init__(self, translator: StreamTranslator, caller: Codec) -> None:
        self._translator = translator
        self._assembler = caller.stream_assembler()

    @property
    def head(self) -> dict[str, Any]:
        return self._assembler.head

    @property
    def events(self) -> int:
        """The caller's events read so far: none when the target's stream said nothing."""
        return self._assembler.events

    @property
    def complete(self) -> bool:
        return self._translator.complete

    @property
    def failed(self) -> bool:
        return self._translator.failure is not None

    def feed(self, data: bytes) -> list[TextDelta]:
        return self._assembler.feed(self._translator.feed(data))

    def end(self) -> ApiError | None:
        """The target's stream ended: the error it failed with (its provider's, a malformed or
        cut stream), told as the translator told it; None: the turn is whole (or empty, which
        ``finish`` says as for any provider)."""
        tail = self._translator.finish()
        failure = self._translator.failure
        if failure is not None and not self._translator.said_nothing:
            return failure
        if failure is None:
            self._assembler.feed(tail)
        return None

    def finish(self) -> dict[str, Any]:
        """The whole turn in the caller's protocol; ``CodecError`` if there is none."""
        return self._assembler.finish()


def translated_turn(
    target: str,
    caller: Codec,
    *,
    provider: str,
    model: str | None,
    include_usage: bool,
    reshaped: dict[str, FunctionTool] | None = None,
    redact: Callable[[str], str] | None = None,
) -> TranslatedTurn:
    """The caller's turn read from a stream of the ``target`` protocol (``stream_translator``'s
    parameters); a failure is the turn's, for the driver to tell in the caller's one stream."""
    translator = stream_translator(
        target,
        caller,
        provider=provider,
        model=model,
        include_usage=include_usage,
        tells=False,
        reshaped=reshaped,
        redact=redact,
    )
    return TranslatedTurn(translator, caller)
