"""Token usage read from a passed-through SSE stream as it goes by, in any codec's protocol."""

from __future__ import annotations

from typing import Any

import orjson

from ..model.token_estimate import answer_tokens
from .base import WireCodec

_MAX_PENDING_LINE = 1 << 20


class StreamUsage:
    """Watches SSE bytes for usage without parsing every event.

    Only ``data:`` lines that mention ``"usage"`` are decoded; the codec says where an event
    keeps its usage. Counts only grow: OpenAI reports usage once at the end, Anthropic input
    tokens at the start and cumulative output tokens later.
    """

    __slots__ = (
        "_codec",
        "_pending",
        "cache_creation",
        "cache_read",
        "calls",
        "input_tokens",
        "output_tokens",
        "written",
    )

    def __init__(self, codec: WireCodec) -> None:
        self._codec = codec
        self._pending = b""
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_read = 0
        self.cache_creation = 0
        self.written = 0
        """Characters the model wrote (text, thinking, tool names and arguments) as the
        stream's events carry them: an answer's size when no usage came."""
        self.calls = 0
        """Tool calls the stream started."""

    def feed(self, chunk: bytes) -> None:
        complete = self.feed_written(chunk)
        if b'"usage"' not in complete:
            return
        for line in complete.split(b"\n"):
            if b'"usage"' in line and line.startswith(b"data:"):
                self._read_event(line[5:])

    def feed_written(self, chunk: bytes) -> bytes:
        """Count what the model wrote in the chunk's complete lines (a translated stream's
        usage is read by its translator); returns those lines."""
        data = self._pending + chunk if self._pending else chunk
        end = data.rfind(b"\n")
        if end < 0:
            self._pending = data if len(data) <= _MAX_PENDING_LINE else b""
            return b""
        self._pending = data[end + 1 :]
        complete = data[:end]
        self.written += sum(map(len, self._codec.written_in_stream.findall(complete)))
        self.calls += len(self._codec.call_in_stream.findall(complete))
        return complete

    def written_tokens(self) -> int:
        """The answer's output tokens, estimated from what the model wrote."""
        return answer_tokens(self.written, self.calls, self._codec.name)

    def _read_event(self, payload: bytes) -> None:
        try:
            event: Any = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if isinstance(event, dict):
            self.read(event)

    def read(self, event: dict[str, Any]) -> None:
        """The usage an event tells, the event parsed already (a translated stream's reader
        shows it every event it parses)."""
        usage = self._codec.usage_of_event(event)
        if not isinstance(usage, dict):
            return  # most events: none told
        input_tokens, output_tokens = self._codec.usage_counts(usage)
        cache_read, cache_creation = self._codec.cache_counts(usage)
        self.cache_read = cache_read or self.cache_read
        self.cache_creation = cache_creation or self.cache_creation
        if input_tokens:
            self.input_tokens = input_tokens
        if output_tokens:
            self.output_tokens = output_tokens
