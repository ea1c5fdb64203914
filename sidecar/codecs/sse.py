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
