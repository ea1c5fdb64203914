"""Stream translation (contract §18), sans-IO: a target's SSE stream, fed in pieces of any
size as they arrive, read once into stream events (``model/neutral.py``) by the reader of its
protocol's home (``codecs/<protocol>/neutral_stream.py``), and then, for a caller of another
protocol:

- relayed (``StreamTranslator``, a pass-through): written event by event as the caller's SSE
  stream by the writer of the caller's home;
- a mediated request's turn (``TranslatedTurn``): folded straight into the answer's parts, its
  text shown as it comes, the whole turn written at its end as a whole answer is written (the
  caller's home's ``write_reply``); nothing of the caller's stream is written and parsed back.

It knows no protocol: what a protocol's stream looks like is its home's.

Whatever the target does — a malformed event, an event past the size bound, a failure event, a
stream that stops before its end marker — a relayed caller gets a well-formed stream that ends
with its protocol's error and end, and a mediated turn ends with that error.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..codecs.base import Codec
from ..codecs.chat import neutral_stream as chat_stream
from ..codecs.messages import neutral_stream as messages_stream
from ..codecs.neutral_stream import Caller, StreamReader, StreamWriter, merged_usage
from ..codecs.responses import neutral_stream as responses_stream
from ..codecs.streaming import TextDelta
from ..model.errors import ApiError
from ..model.neutral import (
    CallArguments,
    CallStarted,
    Ended,
    Failed,
    FunctionTool,
    Part,
    Reasoning,
    Refusal,
    Reply,
    Request,
    Started,
    Stop,
    Stopped,
    StreamEvent,
    Told,
    Usage,
)
from . import PROTOCOLS

MAX_EVENT_BYTES = 8 << 20
"""The most one event may take before it completes: a call's whole arguments in one event
(Ollama sends calls whole) stay far below it; past it, a stream is taken for hostile."""

# Each protocol's streams read into the neutral events and written from them, by its name.
_STREAMS: dict[str, ModuleType] = {
    "chat": chat_stream,
    "messages": messages_stream,
    "responses": responses_stream,
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


# Events of the answer's content (the others tell about it).
_CONTENT = frozenset({str, Refusal, CallStarted, CallArguments, Reasoning})
# Events that carry no answer: a Chat ``[DONE]`` alone reads as a stop and an end.
_NO_ANSWER = frozenset({Started, Stopped, Told, Ended})


def stream_translator(
    target: str,
    caller: Codec,
    *,
    provider: str,
    model: str | None,
    include_usage: bool,
    reshaped: dict[str, FunctionTool] | None = None,
    watch: Callable[[dict[str, Any]], None] | None = None,
    redact: Callable[[str], str] | None = None,
) -> StreamTranslator:
    """A translator from a stream of the ``target`` protocol (``chat``, ``messages``,
    ``responses``) to ``caller``'s. ``model``: the model the caller asked for, shown until the
    target names its own; ``include_usage``: a Chat Completions caller asked for the usage
    chunk; ``reshaped``: the Responses caller's custom and namespaced tools
    (``ResponsesStreamWriter``); ``watch``: sees each event the reader parses
    (``StreamReader.watch``); ``redact``: removes the provider's key from the failure it reports
    in the stream."""
    options = Caller(model, caller.error_body, include_usage, reshaped or {})
    writer: StreamWriter = _STREAMS[caller.name].WRITER(options)
    reader: StreamReader = _STREAMS[target].READER()
    reader.watch = watch
    return StreamTranslator(reader, writer, provider, redact)


class TranslatedTurn:
    """One streamed model call of a mediated request answered in another protocol, read as the
    caller's turn: the target's events (its reader's) folded straight into the answer's parts,
    the text shown as it comes, and the whole turn written once, at its end, in the caller's
    protocol as a whole answer is (no stream of the caller's is written, nor parsed back)."""

    def __init__(
        self,
        reader: StreamReader,
        caller: Codec,
        request: Request,
        provider: str,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self._reader = reader
        self._caller = caller
        self._write_reply = PROTOCOLS[caller.name].write_reply
        self._home = _STREAMS[caller.name]
        self._layout = self._home.ANSWER_PARTS
        self._request = request
        self._provider = provider
        self._redact = redact
        self._head = Started(None, request.model)
        self._parts: list[Part] = []
        self._calls: dict[int, Part] = {}  # source call -> its part
        self._usage = Usage()
        self._stop: Stop | None = None
        self._text: list[str] | None = None  # pieces of the open text part
        self._where: tuple[tuple[int, ...], str | None] = ((0,), None)  # its delta's place
        self._handed = 0  # the caller's parts before this one were shown or stay for the end
        self._item_ids: dict[int, str] = {}  # output item -> the id its text was shown under
        self._unfinished = 0  # bytes fed since the last complete event
        self._answered = False  # the stream carried some content (an empty text counts)
        self.head: dict[str, Any] = {}
        """The answer's head in the caller's protocol, once its first text is shown."""
        self.failure: ApiError | None = None

    @property
    def events(self) -> int:
        """The target's events read so far: none when its stream said nothing."""
        return self._reader.events

    @property
    def complete(self) -> bool:
        """The target's stream carried its end (its connection may be pooled again)."""
        return self._reader.ended

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def feed(self, data: bytes) -> list[TextDelta]:
        """The text deltas the target's ``data`` completes, in order."""
        if self.failure is not None:
            return []
        events = self._reader.feed(data)
        self._unfinished = 0 if events else self._unfinished + len(data)
        deltas: list[TextDelta] = []
        self._fold(events, deltas)
        if self._reader.malformed is not None:
            self._fail(self._malformed(self._reader.malformed))
        elif self._unfinished > MAX_EVENT_BYTES:
            self._fail(self._malformed(f"an event exceeds {MAX_EVENT_BYTES} bytes"))
        return deltas

    def end(self) -> ApiError | None:
        """The target's stream ended: the error it failed with (its provider's, a malformed or
        cut stream); None: the turn is whole (or empty, which ``finish`` says)."""
        if self.failure is None:
            self._fold(self._reader.finish(), [])
        if self.failure is None and self._reader.malformed is not None:
            self._fail(self._malformed(self._reader.malformed))
        if self.failure is None and not self._reader.ended:
            message = f"provider {self._provider!r} ended the stream before its end"
            self._fail(ApiError(502, "upstream_protocol_error", message))
        return None if self._reader.events == 0 else self.failure

    def finish(self) -> dict[str, Any]:
        """The whole turn in the caller's protocol; ``CodecError`` if the stream said
        nothing, in the words of the caller's own reader of an empty stream."""
        if self._reader.events == 0:
            return self._caller.stream_assembler().finish()  # raises: it read nothing
        self._close_text()
        stop: Stop = "tool_calls" if self._calls else self._stop or "end"
        body = self._written(stop, self._usage)
        for index, item_id in self._item_ids.items():  # the ids its text was shown under
            body["output"][index]["id"] = item_id
        return body

    def _fold(self, events: list[StreamEvent], deltas: list[TextDelta]) -> None:
        for event in events:
            if type(event) is str:  # the common case first: the answer's next text
                self._told(event, deltas)
                continue
            self._close_text()
            if type(event) in _CONTENT:
                self._answered = True
            match event:
                case CallStarted(index, call_id, name):
                    call = {"type": "tool_call", "id": call_id, "name": name, "arguments": ""}
                    self._calls[index] = call
                    self._parts.append(call)
                case CallArguments(index, json):
                    if index in self._calls:  # arguments of a call never started: dropped
                        self._calls[index]["arguments"] += json
                case Refusal(text):
                    self._parts.append({"type": "refusal", "text": text})
                case Reasoning(part):
                    self._parts.append(part)
                case Started(answer_id, model, created):
                    self._head = Started(answer_id, model or self._request.model, created)
                case Told(usage):
                    self._usage = merged_usage(self._usage, usage)
                case Stopped(reason):
                    self._stop = reason
                case Failed():
                    self._fail(self._provider_failure(event))
                    return
                case Ended() if not self._answered:
                    # An end with nothing before it (a Chat stream of only ``data: [DONE]``):
                    # the 502 a provider of the caller's protocol gets for it.
                    self._fail(self._malformed("it carried no answer"))
                    return

    def _told(self, text: str, deltas: list[TextDelta]) -> None:
        """The next piece of the answer's text, shown at once."""
        self._answered = True
        if not text:
            return
        if self._text is not None:
            self._text.append(text)
            deltas.append(TextDelta(self._where[0], text, self._where[1]))
            return
        self._text = [text]
        self._parts.append({"type": "text", "text": text})
        body = self._written("end", None)
        if not self.head:
            self.head = self._home.stream_head(body)
        before: tuple[dict[str, Any], ...] = ()
        if self._layout is not None:  # a protocol of parts: where the text is among them
            items_of, goes_before_text = self._layout
            items = items_of(body)
            position = len(items) - 1  # the text is the last part so far
            before = tuple(i for i in items[self._handed : position] if goes_before_text(i))
            self._handed = max(self._handed, position + 1)
            item_id = items[position].get("id")  # an output item's; a text block has none
            if item_id is not None:
                item_id = self._item_ids.setdefault(position, item_id)
                content = len(items[position]["content"]) - 1
                self._where = ((position, content), item_id)
            else:
                self._where = ((position,), None)
        deltas.append(TextDelta(self._where[0], text, self._where[1], before))

    def _close_text(self) -> None:
        if self._text is not None:
            self._parts[-1]["text"] = "".join(self._text)
            self._text = None

    def _written(self, stop: Stop, usage: Usage | None) -> dict[str, Any]:
        head = self._head
        parts = self._parts
        if self._text is not None:  # the open text part as far as it came
            parts = [*parts[:-1], {"type": "text", "text": "".join(self._text)}]
        reply = Reply(head.id or "translated", head.model, parts, stop, usage, head.created)
        return self._write_reply(reply, self._request)  # type: ignore[no-any-return]

    def _provider_failure(self, failed: Failed) -> ApiError:
        """The provider's failure, told without its key (a provider may echo the key it was
        sent in its error's message)."""
        redact = self._redact or (lambda text: text)
        return ApiError(502, redact(failed.code), redact(failed.message), failed.type)

    def _fail(self, err: ApiError) -> None:
        if self.failure is None:
            self.failure = err

    def _malformed(self, why: str) -> ApiError:
        message = f"provider {self._provider!r} sent a stream that is not valid: {why}"
        return ApiError(502, "upstream_protocol_error", message)


def translated_turn(
    target: str,
    caller: Codec,
    request: Request,
    *,
    provider: str,
    redact: Callable[[str], str] | None = None,
) -> TranslatedTurn:
    """The caller's turn (``request``: the caller's request in the neutral shape) read from a
    stream of the ``target`` protocol; a failure is the turn's, for the driver to tell in the
    caller's one stream. ``redact``: see ``stream_translator``."""
    return TranslatedTurn(_STREAMS[target].READER(), caller, request, provider, redact)
