"""Token usage read from provider responses, including SSE streams as they pass by."""

from __future__ import annotations

from typing import Any

import orjson
from clawpod.sidecar.server.errors import Api

_MAX_PENDING_LINE = 1 << 20


def usage_from_body(api: Api, body: Any) -> tuple[int, int]:
    """(input, output) tokens of a non-streaming response body; zeros when absent."""
    if not isinstance(body, dict):
        return 0, 0
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return 0, 0
    if api == "openai":
        return _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
    return _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))


class StreamUsage:
    """Watches SSE bytes for usage without parsing every event.

    Only ``data:`` lines that mention ``"usage"`` are decoded. OpenAI reports usage once (the
    last chunk with ``stream_options.include_usage``); Anthropic reports input tokens in
    ``message_start`` and cumulative output tokens in ``message_delta``.
    """

    __slots__ = ("_api", "_pending", "input_tokens", "output_tokens")

    def __init__(self, api: Api) -> None:
        self._api = api
        self._pending = b""
        self.input_tokens = 0
        self.output_tokens = 0

    def feed(self, chunk: bytes) -> None:
        data = self._pending + chunk if self._pending else chunk
        end = data.rfind(b"\n")
        if end < 0:
            self._pending = data if len(data) <= _MAX_PENDING_LINE else b""
            return
        self._pending = data[end + 1 :]
        complete = data[:end]
        if b'"usage"' not in complete:
            return
        for line in complete.split(b"\n"):
            if b'"usage"' in line and line.startswith(b"data:"):
                self._read_event(line[5:])

    def _read_event(self, payload: bytes) -> None:
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if not isinstance(event, dict):
            return
        if self._api == "anthropic" and isinstance(event.get("message"), dict):
            event = event["message"]  # message_start nests the usage
        usage = event.get("usage")
        if not isinstance(usage, dict):
            return
        if self._api == "openai":
            self._update(usage.get("prompt_tokens"), usage.get("completion_tokens"))
        else:
            self._update(usage.get("input_tokens"), usage.get("output_tokens"))

    def _update(self, input_tokens: Any, output_tokens: Any) -> None:
        if isinstance(input_tokens, int) and input_tokens:
            self.input_tokens = input_tokens
        if isinstance(output_tokens, int) and output_tokens:
            self.output_tokens = output_tokens


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
