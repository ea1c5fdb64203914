"""Provider answers as the providers stream them, for the provider tests."""

from __future__ import annotations

from typing import Any

import orjson


def _data(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def chat_stream_events(
    text: str, *, usage: tuple[int, int] | None = (10, 3), model: str = "gpt-4o"
) -> list[bytes]:
    """Chat Completions chunks: one per word, a finish, then (when asked) the usage chunk."""
    base = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": model}
    events = [
        _data({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    ]
    for word in text.split(" "):
        delta = {"index": 0, "delta": {"content": word + " "}, "finish_reason": None}
        events.append(_data({**base, "choices": [delta]}))
    events.append(_data({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    if usage is not None:
        prompt, completion = usage
        counts = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        events.append(_data({**base, "choices": [], "usage": counts}))
    events.append(b"data: [DONE]\n\n")
    return events


def messages_stream_events(text: str, *, usage: tuple[int, int] = (10, 3)) -> list[bytes]:
    """Anthropic Messages events for one text block."""

    def event(name: str, payload: dict[str, Any]) -> bytes:
        return b"event: " + name.encode() + b"\n" + _data({"type": name, **payload})

    message = {
        "id": "msg_s",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": 1},
    }
    return [
        event("message_start", {"message": message}),
        event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
        event("content_block_stop", {"index": 0}),
        event(
            "message_delta",
            {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": usage[1]}},
        ),
        event("message_stop", {}),
    ]
