"""A wire stream read into the neutral stream events (``model/neutral.py``) and written from
them: what every protocol's reader and writer (``codecs/<protocol>/neutral_stream.py``) shares.

A reader takes a stream event by event as its bytes arrive and keeps only what names the
answer's parts: text and argument pieces leave as soon as their event is complete; usage, stop
reasons and reasoning are read as the protocol's whole-answer reader reads them. What no event
carries (provider-run tools, citations, logprobs, choices past the first) is dropped, as
docs/translation.md lists.

A writer owns one well-formed lifecycle: it opens it once, puts text and call arguments out as
they come, closes each part before the next one opens (the order every provider streams in),
and ends with the protocol's end marker — also when the stream fails, after the failure in the
protocol's own in-band shape. Nothing is written after the end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..model.conversation import CodecError
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
from .sse import EventReader, NotUtf8

ENDS = (Ended, Failed)
"""The events that end a stream: a reader reads nothing after one."""
Content = str | Refusal | CallStarted | CallArguments | Reasoning
_CONTENT = (str, Refusal, CallStarted, CallArguments, Reasoning)
# The whole-answer writers render one reasoning part for us; they read no request field for it.
_NO_REQUEST = Request(model=None, system=[], messages=[])


def one_part_written(write_reply: Any, part: Part) -> dict[str, Any]:
    """One part (a reasoning part) as a protocol's whole-answer ``write_reply`` writes it."""
    return write_reply(Reply("", None, [part], "end", None), _NO_REQUEST)  # type: ignore[no-any-return]


class StreamReader(ABC):
    """One target stream, read as it arrives."""

    def __init__(self) -> None:
        self._reader = EventReader()
        self.ended = False
        """The stream's end marker (or an in-stream failure, its other end) was read."""
        self.events = 0
        """SSE events read: a stream with none said nothing at all."""
        self.malformed: str | None = None
        """Why the stream is not valid, once an event was not (nothing after it is read)."""
        self.watch: Callable[[dict[str, Any]], None] | None = None
        """Sees every event parsed that tells usage (a usage reader: ``codecs/usage.py``)."""

    def feed(self, data: bytes) -> list[StreamEvent]:
        """The events these bytes complete, up to a malformed one (then ``malformed``)."""
        try:
            events = self._reader.feed(data)
        except NotUtf8 as exc:
            return self._up_to(exc)
        return self._read(events)

    def finish(self) -> list[StreamEvent]:
        """What the end of the stream completes."""
        try:
            events = self._reader.finish()
        except NotUtf8 as exc:
            return self._up_to(exc)
        return self._read(events)

    def _up_to(self, not_utf8: NotUtf8) -> list[StreamEvent]:
        """The events before one that is not UTF-8: they stand, however the bytes were cut."""
        found = self._read(not_utf8.events)
        self.malformed = self.malformed or str(not_utf8)
        return found

    def _read(self, events: list[tuple[str | None, str]]) -> list[StreamEvent]:
        found: list[StreamEvent] = []
        if self.ended or self.malformed:
            return found  # nothing after the end counts
        # The piece's events are parsed here, then read by the protocol's home in one loop of
        # its own (``_events``): control stays in the home for the whole piece, not in and out
        # of it an event.
        parsed: list[tuple[str | None, dict[str, Any] | None]] = []
        not_json: str | None = None
        for name, payload in events:
            self.events += 1
            if payload[:1] != "{" and payload.strip() == self.end_marker:
                parsed.append((name, None))
                break  # nothing after the end marker counts
            try:
                parsed.append((name, self._object(payload)))
            except ValueError as exc:  # the events before it stand
                not_json = str(exc)
                break
        try:
            self._events(parsed, found)
        except ValueError as exc:  # CodecError: the events before it stand
            self.malformed = str(exc)
            return found
        if found and type(found[-1]) in ENDS:
            self.ended = True
        else:
            self.malformed = not_json
        return found

    end_marker: str | None = None
    """A protocol's end marker that is not JSON (Chat Completions' ``[DONE]``): its event
    reaches ``_events`` as ``None``."""

    @abstractmethod
    def _events(
        self, events: list[tuple[str | None, dict[str, Any] | None]], found: list[StreamEvent]
    ) -> None:
        """Read the events of one piece (each its SSE event name and its payload parsed) in
        order, up to the stream's end (``ENDS``: nothing after it is read)."""

    def _object(self, payload: str) -> dict[str, Any]:
        """An event's payload parsed, and shown to ``watch`` if it tells usage (no event
        without the key does: the pass-through's usage reader looks for it the same way)."""
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise CodecError(f"an event is not JSON ({exc})") from None
        if type(data) is not dict:
            raise CodecError("an event is not a JSON object")
        if self.watch is not None and '"usage"' in payload:
            self.watch(data)
        return data  # type: ignore[no-any-return]


def dict_of(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def str_of(value: Any) -> str:
    return value if isinstance(value, str) else ""


def failure_of(error: Any) -> Failed:
    error = dict_of(error)
    code = str_of(error.get("code")) or str_of(error.get("type")) or "upstream_error"
    message = str_of(error.get("message")) or "the provider reported a failure"
    return Failed(code, message, str_of(error.get("type")) or "api_error")


def reasoning_events(parts: list[Part], found: list[StreamEvent]) -> None:
    found += [Reasoning(p) for p in parts if p["type"] == "reasoning"]


@dataclass(frozen=True, slots=True)
class Caller:
    """What a caller's stream is written for: the model it asked for (shown until the provider
    names its own), its protocol's in-band error body, whether it asked for the usage chunk
    (Chat Completions' ``stream_options.include_usage``), and its tools whose calls go back in
    a shape of their own, by the name the provider saw (Responses' custom and namespaced
    tools, ``codecs/responses/neutral.py`` ``reshaped_tools``)."""

    model: str | None
    error_body: Callable[[ApiError], dict[str, Any]]
    include_usage: bool = False
    reshaped: Mapping[str, FunctionTool] = field(default_factory=dict)


class StreamWriter(ABC):
    """The caller's one stream lifecycle, written from neutral events."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller
        self._model = caller.model
        self._head = Started(None, caller.model)
        self.opened = False
        self.closed = False
        self.failure: ApiError | None = None
        """The error the lifecycle ended with, if it failed."""
        self._usage = Usage()
        self._stop: Stop | None = None

    def write(self, events: list[StreamEvent]) -> bytes:
        frames: list[bytes] = []
        for event in events:
            if self.closed:
                break
            if type(event) in _CONTENT:  # the common case first: every piece of the answer
                if not self.opened:
                    frames.append(self._open_once())
                frames.append(self._content(event))  # type: ignore[arg-type]
            elif isinstance(event, Started):
                # The lifecycle opens with its first content, or at the end.
                self._head = Started(event.id, event.model or self._model, event.created)
            elif isinstance(event, Told):
                self._usage = merged_usage(self._usage, event.usage)
            elif isinstance(event, Stopped):
                self._stop = event.reason
            elif isinstance(event, Failed):
                err = ApiError(502, event.code, event.message, event.type)
                frames.append(self.fail(err))
            elif isinstance(event, Ended):
                frames.append(self._open_once() + self._end())
                self.closed = True
        return b"".join(frames)

    def fail(self, err: ApiError) -> bytes:
        """End the lifecycle with ``err`` in the protocol's in-band shape, then its end."""
        if self.closed:
            return b""
        self.closed = True
        self.failure = err
        return self._open_once() + self._failure(err)

    def _open_once(self) -> bytes:
        if self.opened:
            return b""
        self.opened = True
        return self._open()

    @abstractmethod
    def _open(self) -> bytes: ...

    @abstractmethod
    def _content(self, event: Content) -> bytes: ...

    def _stop_reason(self, calls: bool) -> Stop:
        """The caller runs calls only when told so, whatever the target said."""
        return "tool_calls" if calls else self._stop or "end"

    @abstractmethod
    def _end(self) -> bytes: ...

    @abstractmethod
    def _failure(self, err: ApiError) -> bytes: ...


def merged_usage(known: Usage, told: Usage) -> Usage:
    """Counts only grow: a protocol may tell input at the start and output at the end."""
    return Usage(
        max(known.input, told.input),
        max(known.output, told.output),
        max(known.cache_read, told.cache_read),
        max(known.cache_creation, told.cache_creation),
        max(known.reasoning, told.reasoning),
    )


def prefixed(prefix: str, answer_id: str | None) -> str:
    """The target's id for the answer under the prefix the caller's protocol uses."""
    if not answer_id:
        return f"{prefix}translated"
    return answer_id if answer_id.startswith(prefix) else prefix + answer_id
