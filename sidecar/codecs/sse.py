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


class EventReader:
    """``parse_events`` for a stream that arrives in pieces: feed bytes as they come, get the
    events they complete; ``finish`` yields what the end of the stream completes."""

    def __init__(self) -> None:
        self._pending = b""  # the start of a line whose end has not arrived
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[tuple[str | None, str]]:
        lines = (self._pending + data).splitlines(keepends=True)
        self._pending = b""
        if lines and (not lines[-1].endswith((b"\n", b"\r")) or lines[-1].endswith(b"\r")):
            # Unfinished, or a CR whose LF may be in the next piece.
            self._pending = lines.pop()
        events: list[tuple[str | None, str]] = []
        for line in lines:
            self._line(line.rstrip(b"\r\n").decode("utf-8"), events)
        return events

    def finish(self) -> list[tuple[str | None, str]]:
        events: list[tuple[str | None, str]] = []
        if self._pending:
            self._line(self._pending.rstrip(b"\r\n").decode("utf-8"), events)
            self._pending = b""
        self._line("", events)
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
