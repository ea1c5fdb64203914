"""A target's SSE stream read into neutral stream events (``model/stream_events.py``), one
reader per protocol, event by event as the bytes arrive; the other half of stream translation
is ``stream_writers.py``.

Readers keep nothing of the answer but what they need to name its parts: text and argument
pieces leave as soon as their event is complete. What the neutral events cannot carry
(reasoning, provider-run tools, citations, logprobs, choices past the first) is dropped here,
as ``docs/translation.md`` lists.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import orjson

from clawpod.sidecar.codecs.sse import EventReader
from clawpod.sidecar.model.conversation import CodecError
from clawpod.sidecar.model.stream_events import (
    CallArguments,
    CallStarted,
    Ended,
    Failed,
    Started,
    Stopped,
    StopReason,
    StreamEvent,
    Text,
    TokenUsage,
)

_CHAT_STOPS: dict[str, StopReason] = {
    "stop": "end",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}
_MESSAGES_STOPS: dict[str, StopReason] = {
    "end_turn": "end",
    "pause_turn": "end",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "stop_sequence": "stop_sequence",
    "refusal": "content_filter",
}
_RESPONSES_INCOMPLETE: dict[str, StopReason] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}


class StreamReader(ABC):
    """One target stream, read as it arrives."""

    def __init__(self) -> None:
        self._reader = EventReader()
        self.ended = False
        """The stream's end marker (or an in-stream failure, its other end) was read."""

    def feed(self, data: bytes) -> list[StreamEvent]:
        """The neutral events these bytes complete; ``CodecError`` for a malformed event."""
        return self._read(self._reader.feed(data))

    def finish(self) -> list[StreamEvent]:
        """What the end of the stream completes."""
        return self._read(self._reader.finish())

    def _read(self, events: list[tuple[str | None, str]]) -> list[StreamEvent]:
        found: list[StreamEvent] = []
        for name, payload in events:
            if self.ended:
                break  # nothing after the end counts
            self._event(name, payload, found)
            self.ended = any(isinstance(e, Ended | Failed) for e in found)
        return found

    @abstractmethod
    def _event(self, name: str | None, payload: str, found: list[StreamEvent]) -> None: ...


def _object(payload: str) -> dict[str, Any]:
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"an event is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CodecError("an event is not a JSON object")
    return data


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _failure(error: Any, fallback_code: str) -> Failed:
    error = _dict(error)
    code = _str(error.get("code")) or _str(error.get("type")) or fallback_code
    message = _str(error.get("message")) or "the provider reported a failure"
    return Failed(code, message, _str(error.get("type")) or "api_error")


def _openai_usage(usage: dict[str, Any], input_key: str, output_key: str) -> TokenUsage:
    input_details = _dict(usage.get(f"{input_key}_details"))
    output_details = _dict(usage.get(f"{output_key}_details"))
    return TokenUsage(
        input_tokens=_int(usage.get(input_key)),
        output_tokens=_int(usage.get(output_key)),
        cache_read=_int(input_details.get("cached_tokens")),
        reasoning_tokens=_int(output_details.get("reasoning_tokens")),
    )


class ChatStreamReader(StreamReader):
    """``chat.completion.chunk`` events of choice 0 (no other protocol has several choices).

    Servers differ in how they number calls (``openai_stream._slot_of`` lists them): a
    fragment starts a call when its index is new or names another id than its index's call.
    """

    def __init__(self) -> None:
        super().__init__()
        self._started = False
        self._calls: dict[Any, tuple[int, str | None]] = {}  # server index -> (call, its id)
        self._stop: StopReason | None = None

    def _event(self, name: str | None, payload: str, found: list[StreamEvent]) -> None:
        if payload.strip() == "[DONE]":
            found += [Stopped(self._stop or ("tool_calls" if self._calls else "end")), Ended()]
            return
        chunk = _object(payload)
        if "error" in chunk:
            found.append(_failure(chunk["error"], "upstream_error"))
            return
        if not self._started:
            self._started = True
            found.append(Started(chunk.get("id"), chunk.get("model"), _int(chunk.get("created"))))
        if isinstance(chunk.get("usage"), dict):
            found.append(_openai_usage(chunk["usage"], "prompt_tokens", "completion_tokens"))
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice, found)

    def _choice(self, choice: dict[str, Any], found: list[StreamEvent]) -> None:
        delta = _dict(choice.get("delta"))
        if content := _str(delta.get("content")):
            found.append(Text(content))
        for fragment in delta.get("tool_calls") or []:
            if isinstance(fragment, dict):
                self._fragment(fragment, found)
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            self._stop = _CHAT_STOPS.get(reason, "end")

    def _fragment(self, fragment: dict[str, Any], found: list[StreamEvent]) -> None:
        call_id = fragment.get("id") if isinstance(fragment.get("id"), str) else None
        index = fragment.get("index")
        function = _dict(fragment.get("function"))
        known = self._calls.get(index)
        if known is None or (call_id and known[1] not in (None, call_id)):
            known = self._calls[index] = (len(self._calls), call_id)
            # Ids are the client's to send back: one is made where a server gave none.
            found.append(
                CallStarted(known[0], call_id or f"call_{known[0]}", function.get("name") or "")
            )
        if arguments := _str(function.get("arguments")):
            found.append(CallArguments(known[0], arguments))


class MessagesStreamReader(StreamReader):
    """``message_start`` … ``message_stop``; ``tool_use`` blocks are the calls, ``text`` blocks
    the text. Thinking and provider-run blocks are dropped."""

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[int, bool] = {}  # tool_use block index -> any argument piece passed
        self._usage: dict[str, Any] = {}

    def _event(self, name: str | None, payload: str, found: list[StreamEvent]) -> None:
        data = _object(payload)
        kind = data.get("type", name)
        if kind == "message_start":
            message = _dict(data.get("message"))
            found.append(Started(message.get("id"), message.get("model")))
            self._usage = _dict(message.get("usage"))
        elif kind == "content_block_start":
            self._block_start(_int(data.get("index")), _dict(data.get("content_block")), found)
        elif kind == "content_block_delta":
            self._delta(_int(data.get("index")), _dict(data.get("delta")), found)
        elif kind == "content_block_stop" and self._calls.get(_int(data.get("index"))) is False:
            # A call without arguments streams none; in the other protocols they are "{}".
            found.append(CallArguments(_int(data.get("index")), "{}"))
        elif kind == "message_delta":
            self._usage = {**self._usage, **_dict(data.get("usage"))}
            found.append(self._token_usage())
            reason = _dict(data.get("delta")).get("stop_reason")
            if isinstance(reason, str):
                found.append(Stopped(_MESSAGES_STOPS.get(reason, "end")))
        elif kind == "message_stop":
            found.append(Ended())
        elif kind == "error":
            found.append(_failure(data.get("error"), "upstream_error"))

    def _block_start(self, index: int, block: dict[str, Any], found: list[StreamEvent]) -> None:
        if block.get("type") == "text" and (text := _str(block.get("text"))):
            found.append(Text(text))
        elif block.get("type") == "tool_use":
            self._calls[index] = bool(block.get("input"))
            found.append(CallStarted(index, _str(block.get("id")), _str(block.get("name"))))
            if block.get("input"):  # a block that comes whole
                found.append(CallArguments(index, orjson.dumps(block["input"]).decode()))

    def _delta(self, index: int, delta: dict[str, Any], found: list[StreamEvent]) -> None:
        kind = delta.get("type")
        if kind == "text_delta" and (text := _str(delta.get("text"))):
            found.append(Text(text))
        elif kind == "input_json_delta" and index in self._calls:
            piece = _str(delta.get("partial_json"))
            if piece:
                self._calls[index] = True
                found.append(CallArguments(index, piece))

    def _token_usage(self) -> TokenUsage:
        usage = self._usage
        read = _int(usage.get("cache_read_input_tokens"))
        creation = _int(usage.get("cache_creation_input_tokens"))
        return TokenUsage(
            input_tokens=_int(usage.get("input_tokens")) + read + creation,
            output_tokens=_int(usage.get("output_tokens")),
            cache_read=read,
            cache_creation=creation,
        )


class ResponsesStreamReader(StreamReader):
    """``response.created`` … ``response.completed``: message text and ``function_call`` items.
    Lenient as the assembler is with servers that leave out indexes (``llama-server``): an
    event without ``output_index`` belongs to the item its ``item_id`` names, else the last."""

    def __init__(self) -> None:
        super().__init__()
        self._items: dict[str | None, int] = {}  # item id (or call id) -> output index
        self._last = -1
        self._arguments: dict[int, int] = {}  # call's output index -> argument chars passed

    def _event(self, name: str | None, payload: str, found: list[StreamEvent]) -> None:
        data = _object(payload)
        kind = data.get("type", name)
        if kind == "response.created":
            response = _dict(data.get("response"))
            found.append(
                Started(response.get("id"), response.get("model"), _int(response.get("created_at")))
            )
        elif kind == "response.output_item.added":
            self._added(data, _dict(data.get("item")), found)
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            if text := _str(data.get("delta")):
                found.append(Text(text))
        elif kind == "response.function_call_arguments.delta":
            index = self._index(data)
            if index in self._arguments and (piece := _str(data.get("delta"))):
                self._arguments[index] += len(piece)
                found.append(CallArguments(index, piece))
        elif kind == "response.output_item.done":
            self._done(data, _dict(data.get("item")), found)
        elif kind in ("response.completed", "response.incomplete"):
            self._terminal(_dict(data.get("response")), found)
        elif kind == "response.failed":
            found.append(_failure(_dict(data.get("response")).get("error"), "upstream_error"))
        elif kind == "error":
            found.append(_failure(data, "upstream_error"))

    def _added(self, data: dict[str, Any], item: dict[str, Any], found: list[StreamEvent]) -> None:
        index = _int(data["output_index"]) if "output_index" in data else self._last + 1
        self._last = max(self._last, index)
        self._items[item.get("id") or item.get("call_id")] = index
        if item.get("type") == "function_call":
            self._call(index, item, found)

    def _call(self, index: int, item: dict[str, Any], found: list[StreamEvent]) -> None:
        self._arguments[index] = 0
        call_id = _str(item.get("call_id")) or f"call_{index}"
        found.append(CallStarted(index, call_id, _str(item.get("name"))))
        self._rest_of_arguments(index, item, found)

    def _done(self, data: dict[str, Any], item: dict[str, Any], found: list[StreamEvent]) -> None:
        if item.get("type") != "function_call":
            return
        index = self._index(data, item.get("id") or item.get("call_id"))
        if index not in self._arguments:  # a call the stream never opened: whole, now
            index = self._last = self._last + 1
            self._call(index, item, found)
        else:
            self._rest_of_arguments(index, item, found)

    def _rest_of_arguments(
        self, index: int, item: dict[str, Any], found: list[StreamEvent]
    ) -> None:
        """Arguments an item carries beyond the deltas already passed (a server that sends a
        call whole, in its added or done event)."""
        arguments = _str(item.get("arguments"))
        passed = self._arguments[index]
        if len(arguments) > passed:
            self._arguments[index] = len(arguments)
            found.append(CallArguments(index, arguments[passed:]))

    def _index(self, data: dict[str, Any], item_id: Any = None) -> int:
        if "output_index" in data:
            return _int(data["output_index"])
        named = self._items.get(data.get("item_id") or item_id)
        return self._last if named is None else named

    def _terminal(self, response: dict[str, Any], found: list[StreamEvent]) -> None:
        usage = response.get("usage")
        if isinstance(usage, dict):
            found.append(_openai_usage(usage, "input_tokens", "output_tokens"))
        reason = _dict(response.get("incomplete_details")).get("reason")
        if response.get("status") == "incomplete":
            found.append(Stopped(_RESPONSES_INCOMPLETE.get(_str(reason), "length")))
        else:
            found.append(Stopped("tool_calls" if self._arguments else "end"))
        found.append(Ended())
