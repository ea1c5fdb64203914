"""Server-sent events: framing re-streamed answers, parsing recorded or unexpected streams."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def data_frame(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def event_frame(event: str, payload: Any) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def parse_events(text: bytes | str) -> Iterator[tuple[str | None, str]]:
    """Yield (event name, data) for each event; comments and empty events are skipped."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    event: str | None = None
    data: list[str] = []
    # bytes.splitlines() breaks at CR, LF and CRLF only: SSE's line ends. str.splitlines() would
    # also break inside JSON strings holding U+2028, U+2029 or NEL.
    for raw in [*text.splitlines(), b""]:
        line = raw.decode("utf-8")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = None, []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)


def pieces(text: str, size: int) -> Iterator[str]:
    """Split text for re-streaming; at least one piece so empty text still makes a delta."""
    if not text:
        yield ""
        return
    for start in range(0, len(text), size):
        yield text[start : start + size]


class NotUtf8(ValueError):
    """A stream's event is not UTF-8; ``events``: those the same bytes completed before it. It
    names the first bad byte alone: the decoder's position and reason are those of whatever
    slice was decoded (a line, an event, a piece's events), which depends on how the stream
    was cut into pieces."""

    def __init__(self, error: UnicodeDecodeError, events: list[tuple[str | None, str]]) -> None:
        byte = error.object[error.start]
        super().__init__(f"an event is not UTF-8 (at a byte 0x{byte:02x})")
        self.events = events


_LF = 10  # b"\n"[0]
_CR = 13  # b"\r"[0]


class EventReader:
    """``parse_events`` for a stream that arrives in pieces: feed bytes as they come, get the
    events they complete; ``finish`` yields what the end of the stream completes.

    Hand-written because it runs on every event of every translated or mediated stream: the
    SSE parsers of the maintained clients (httpx-sse, the OpenAI and Anthropic SDKs' decoders)
    take one line at a time in Python, where this finds line ends with ``bytes.find`` (memchr)
    and cuts an event of one ``data:`` line, or an ``event:`` line and a ``data:`` line (nearly
    every event of every provider), straight out of the bytes. A stream whose lines end in CR
    or CRLF is read line by line from its first CR on.
    """

    def __init__(self) -> None:
        self._pending = b""  # the start of an event (line by line: of a line) not yet complete
        # Pieces fed after it that complete nothing, joined to it once something may: an event
        # sent in many pieces is then copied and searched once, not once a piece.
        self._later: list[bytes] = []
        self._by_line = False  # a CR was seen
        self._event: str | None = None  # line by line: the event being read
        self._data: list[str] = []

    def completes_nothing(self, data: bytes) -> bool:
        """``data``, fed next, cannot complete the event (line by line: the line) begun: it
        holds no blank line, nor a line end at all line by line, nor one that would make one
        with the end of what is pending."""
        if not self._pending:
            return False
        last = (self._later[-1] if self._later else self._pending)[-1]
        if self._by_line:
            return _LF not in data and _CR not in data and last != _CR
        return _CR not in data and b"\n\n" not in data and not (last == _LF and data[:1] == b"\n")

    def _whole_pending(self) -> bytes:
        if self._later:
            self._pending = b"".join([self._pending, *self._later])
            self._later = []
        return self._pending

    def feed(self, data: bytes) -> list[tuple[str | None, str]]:
        """The events ``data`` completes; ``NotUtf8`` (a ``ValueError``) at one that is not
        UTF-8, holding those before it."""
        events: list[tuple[str | None, str]] = []
        try:
            return self._feed(data, events)
        except UnicodeDecodeError as exc:
            raise NotUtf8(exc, events) from None

    def _feed(
        self, data: bytes, events: list[tuple[str | None, str]]
    ) -> list[tuple[str | None, str]]:
        if self.completes_nothing(data):
            self._later.append(data)
            return events
        if self._by_line:
            return self._feed_lines(data, events)
        buffer = self._whole_pending() + data if self._pending else data
        if _CR in buffer:
            self._by_line, self._pending = True, b""
            return self._feed_lines(buffer, events)
        find, size, start = buffer.find, len(buffer), 0
        while True:
            end = find(b"\n", start)  # the end of the event's first line
            if end < 0:
                break
            if end + 1 < size and buffer[end + 1] == _LF and buffer.startswith(b"data: ", start):
                events.append((None, buffer[start + 6 : end].decode("utf-8")))  # most events
                start = end + 2
                continue
            if buffer.startswith(b"event: ", start) and buffer.startswith(b"data: ", end + 1):
                data_end = find(b"\n", end + 1)  # the rest of the events: a name and data
                if 0 < data_end < size - 1 and buffer[data_end + 1] == _LF:
                    name = buffer[start + 7 : end].decode("utf-8")
                    events.append((name, buffer[end + 7 : data_end].decode("utf-8")))
                    start = data_end + 2
                    continue
            if end == start:  # a blank line with no event before it
                start += 1
                continue
            while end + 1 < size and buffer[end + 1] != _LF:  # more lines before the blank one
                end = find(b"\n", end + 1)
                if end < 0:
                    break
            if end < 0 or end + 1 >= size:
                break  # the blank line that ends the event has not arrived
            self._lines(buffer[start:end].decode("utf-8"), events)  # comments, other fields
            start = end + 2
        self._pending = buffer[start:] if start else buffer
        return events

    def finish(self) -> list[tuple[str | None, str]]:
        """What the end of the stream completes; ``NotUtf8`` as ``feed``."""
        events: list[tuple[str | None, str]] = []
        try:
            return self._finish(events)
        except UnicodeDecodeError as exc:
            raise NotUtf8(exc, events) from None

    def _finish(self, events: list[tuple[str | None, str]]) -> list[tuple[str | None, str]]:
        self._whole_pending()
        if not self._by_line:
            self._lines(self._pending.decode("utf-8"), events)
            self._pending = b""
            return events
        if self._pending:
            self._line(self._pending.rstrip(b"\r\n").decode("utf-8"), events)
            self._pending = b""
        self._line("", events)
        return events

    def _lines(self, block: str, events: list[tuple[str | None, str]]) -> None:
        """An event read line by line (comments, other fields, several data lines)."""
        for line in block.split("\n"):
            self._line(line, events)
        self._line("", events)

    def _feed_lines(
        self, data: bytes, events: list[tuple[str | None, str]]
    ) -> list[tuple[str | None, str]]:
        lines = (self._whole_pending() + data).splitlines(keepends=True)
        self._pending = b""
        if lines and (not lines[-1].endswith((b"\n", b"\r")) or lines[-1].endswith(b"\r")):
            # Unfinished, or a CR whose LF may be in the next piece.
            self._pending = lines.pop()
        for line in lines:
            self._line(line.rstrip(b"\r\n").decode("utf-8"), events)
        return events

    def _line(self, line: str, events: list[tuple[str | None, str]]) -> None:
        if not line:
            if self._data:
                events.append((self._event, "\n".join(self._data)))
            self._event, self._data = None, []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                self._event = value
            elif name == "data":
                self._data.append(value)
