"""A target's SSE stream read into stream events (``model/neutral.py``), one reader per
protocol, event by event as the bytes arrive; the other half of stream translation is
``stream_writers.py``.

Readers keep only what names the answer's parts: text and argument pieces leave as soon as
their event is complete. Usage and stop reasons are read as the whole-answer readers read
them (``chat``, ``messages``, ``responses`` of this package); reasoning leaves whole, once its
block or item is complete, as those readers make it. What no event carries (provider-run
tools, citations, logprobs, choices past the first) is dropped here, as docs/translation.md
lists.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import orjson

from ..codecs.base import as_int
from ..codecs.sse import EventReader, NotUtf8
from ..model.conversation import CodecError
from ..model.neutral import (
    CallArguments,
    CallStarted,
    Ended,
    Failed,
    Part,
    Reasoning,
    Started,
    Stop,
    Stopped,
    StreamEvent,
    Text,
    Told,
    Usage,
)
from . import chat, messages, responses

_ENDS = (Ended, Failed)
_LEGACY = "function_call"  # the key of a Chat stream's legacy call among its indexed ones


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
        for name, payload in events:
            self.events += 1
            try:
                self._event(name, payload, found)
            except ValueError as exc:  # CodecError, bad JSON: the events before it stand
                self.malformed = str(exc)
                break
            if found and type(found[-1]) in _ENDS:
                self.ended = True
                break
        return found

    @abstractmethod
    def _event(self, name: str | None, payload: str, found: list[StreamEvent]) -> None: ...

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


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _failure(error: Any) -> Failed:
    error = _dict(error)
    code = _str(error.get("code")) or _str(error.get("type")) or "upstream_error"
    message = _str(error.get("message")) or "the provider reported a failure"
    return Failed(code, message, _str(error.get("type")) or "api_error")


def _reasoning(parts: list[Part], found: list[StreamEvent]) -> None:
    found += [Reasoning(p) for p in parts if p["type"] == "reasoning"]


class ChatStreamReader(StreamReader):
    """``chat.completion.chunk`` events of choice 0 (no other protocol has several choices).

    Servers number calls differently (``codecs/openai_stream.py`` lists how): a fragment
    starts a call when its index is new or names another id than its index's call.
    """

    def __init__(self) -> None:
        super().__init__()
        self._started = False
        self._calls: dict[Any, tuple[int, str | None]] = {}  # server index -> (call, its id)
        self._thought = ""  # reasoning_content, out whole before the answer
        self._stop: Stop | None = None

    def _event(self, name: str | None, payload: str, found: list[StreamEvent]) -> None:
        if payload[:1] != "{" and payload.strip() == "[DONE]":
            self._think(found)
            stop = self._stop or "end"
            found += [Stopped("tool_calls" if self._calls else stop), Ended()]
            return
        chunk = self._object(payload)
        if "error" in chunk:
            found.append(_failure(chunk["error"]))
            return
        if not self._started:
            self._started = True
            found.append(Started(chunk.get("id"), chunk.get("model"), as_int(chunk.get("created"))))
        usage = chunk.get("usage")
        if usage:
            found.append(Told(chat.read_usage(usage) or Usage()))
        for choice in chunk.get("choices") or ():
            if type(choice) is not dict or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if type(delta) is dict:
                content = delta.get("content")
                if len(delta) == 1 and content and type(content) is str and not self._thought:
                    found.append(Text(content))  # nearly every event: one piece of text
                else:
                    self._delta(delta, found)
            reason = choice.get("finish_reason")
            if reason and type(reason) is str:
                self._stop = chat.FINISH_TO_STOP.get(reason, "end")

    def _delta(self, delta: dict[str, Any], found: list[StreamEvent]) -> None:
        thought = delta.get("reasoning_content")
        if thought and isinstance(thought, str):
            self._thought += thought
        content = delta.get("content")
        if content and isinstance(content, str):
            self._think(found)
            found.append(Text(content))
        refusal = delta.get("refusal")
        if refusal and isinstance(refusal, str):
            self._think(found)
            found.append(Text(refusal, refusal=True))
        fragments = delta.get("tool_calls")
        for fragment in fragments or ():
            if isinstance(fragment, dict):
                self._think(found)
                self._fragment(fragment, found)
        legacy = delta.get("function_call")
        if isinstance(legacy, dict) and not fragments:
            self._think(found)
            self._legacy(legacy, found)

    def _think(self, found: list[StreamEvent]) -> None:
        if self._thought:
            found.append(Reasoning({"type": "reasoning", "text": self._thought}))
            self._thought = ""

    def _legacy(self, function_call: dict[str, Any], found: list[StreamEvent]) -> None:
        """The legacy ``function_call`` field, read only from a stream that sends no
        ``tool_calls`` (llama-cpp-python mirrors each fragment in both): one call, named as
        ``chat.read_reply`` names it."""
        if any(key != _LEGACY for key in self._calls):
            return
        if _LEGACY not in self._calls:
            name = _str(function_call.get("name"))
            self._calls[_LEGACY] = (len(self._calls), None)
            found.append(CallStarted(self._calls[_LEGACY][0], f"call_{name or 'function'}", name))
        if arguments := _str(function_call.get("arguments")):
            found.append(CallArguments(self._calls[_LEGACY][0], arguments))

    def _fragment(self, fragment: dict[str, Any], found: list[StreamEvent]) -> None:
        call_id = fragment.get("id") if isinstance(fragment.get("id"), str) else None
        index = fragment.get("index")
        function = _dict(fragment.get("function"))
        known = self._calls.get(index)
        if known is None or (call_id and known[1] not in (None, call_id)):
            known = self._calls[index] = (len(self._calls), call_id)
            # Ids are the caller's to send back: one is made where a server gave none.
            call = CallStarted(known[0], call_id or f"call_{known[0]}", _str(function.get("name")))
            found.append(call)
        if arguments := _str(function.get("arguments")):
            found.append(CallArguments(known[0], arguments))


class MessagesStreamReader(StreamReader):
    """``message_start`` … ``message_stop``: ``text`` blocks are the text, ``tool_use`` blocks
    the calls, ``thinking`` blocks the reasoning; provider-run blocks are dropped."""

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[int, bool] = {}  # tool_use block -> an argument piece was passed
        self._thinking: dict[int, dict[str, Any]] = {}  # reasoning blocks being read
        self._usage: dict[str, Any] = {}

    def _event(self, name: str | None, payload: str, found: list[StreamEvent]) -> None:
        data = self._object(payload)
        kind = data.get("type", name)
        index = as_int(data.get("index"))
        if kind == "content_block_delta":
            delta = data.get("delta")
            if type(delta) is dict:
                self._delta(index, delta, found)
        elif kind == "message_start":
            message = _dict(data.get("message"))
            found.append(Started(message.get("id"), message.get("model")))
            self._usage = _dict(message.get("usage"))
        elif kind == "content_block_start":
            self._block_start(index, _dict(data.get("content_block")), found)
        elif kind == "content_block_stop":
            self._block_stop(index, found)
        elif kind == "message_delta":
            self._usage = {**self._usage, **_dict(data.get("usage"))}
            usage = messages.read_usage(self._usage)
            if usage is not None:
                found.append(Told(usage))
            reason = _dict(data.get("delta")).get("stop_reason")
            if isinstance(reason, str):
                found.append(Stopped(messages.WIRE_TO_STOP.get(reason, "end")))
        elif kind == "message_stop":
            found.append(Ended())
        elif kind == "error":
            found.append(_failure(data.get("error")))

    def _block_start(self, index: int, block: dict[str, Any], found: list[StreamEvent]) -> None:
        kind = block.get("type")
        if kind == "text" and (text := _str(block.get("text"))):
            found.append(Text(text))
        elif kind == "tool_use":
            self._calls[index] = bool(block.get("input"))
            call_id, name = _str(block.get("id")), _str(block.get("name"))
            found.append(CallStarted(index, call_id, name))
            if block.get("input"):  # a block that comes whole
                found.append(CallArguments(index, orjson.dumps(block["input"]).decode()))
        elif kind in ("thinking", "redacted_thinking"):
            self._thinking[index] = dict(block)

    def _delta(self, index: int, delta: dict[str, Any], found: list[StreamEvent]) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if text and type(text) is str:  # nearly every event: one piece of text
                found.append(Text(text))
        elif kind == "input_json_delta" and index in self._calls:
            piece = _str(delta.get("partial_json"))
            if piece:
                self._calls[index] = True
                found.append(CallArguments(index, piece))
        elif index in self._thinking:
            block = self._thinking[index]
            if kind == "thinking_delta":
                block["thinking"] = _str(block.get("thinking")) + _str(delta.get("thinking"))
            elif kind == "signature_delta":
                block["signature"] = _str(delta.get("signature"))

    def _block_stop(self, index: int, found: list[StreamEvent]) -> None:
        if self._calls.get(index) is False:
            # A call without arguments streams none; the other protocols carry "{}".
            found.append(CallArguments(index, "{}"))
        block = self._thinking.pop(index, None)
        if block is not None:
            _reasoning(messages.read_reply({"content": [block]}).parts, found)


class ResponsesStreamReader(StreamReader):
    """``response.created`` … ``response.completed``: message text, ``function_call`` items,
    ``reasoning`` items (whole, once done). Lenient as the assembler is with servers that leave
    out indexes (``llama-server``): an event without ``output_index`` belongs to the item its
    ``item_id`` names, else to the last one added."""

    def __init__(self) -> None:
        super().__init__()
        self._items: dict[str | None, int] = {}  # item id (or call id) -> output index
        self._last = -1
        self._arguments: dict[int, int] = {}  # a call's output index -> argument chars passed
        self._refused = False

    def _event(self, name: str | None, payload: str, found: list[StreamEvent]) -> None:
        data = self._object(payload)
        kind = data.get("type", name)
        if kind == "response.created":
            response = _dict(data.get("response"))
            created = as_int(response.get("created_at"))
            found.append(Started(response.get("id"), response.get("model"), created))
        elif kind == "response.output_item.added":
            self._added(data, _dict(data.get("item")), found)
        elif kind == "response.output_text.delta" and (text := _str(data.get("delta"))):
            found.append(Text(text))
        elif kind == "response.refusal.delta" and (text := _str(data.get("delta"))):
            self._refused = True
            found.append(Text(text, refusal=True))
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
            found.append(_failure(_dict(data.get("response")).get("error")))
        elif kind == "error":
            found.append(_failure(data))

    def _added(self, data: dict[str, Any], item: dict[str, Any], found: list[StreamEvent]) -> None:
        index = as_int(data["output_index"]) if "output_index" in data else self._last + 1
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
        kind = item.get("type")
        if kind == "reasoning":
            _reasoning(responses.read_reply({"output": [item]}).parts, found)
        if kind != "function_call":
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
            return as_int(data["output_index"])
        named = self._items.get(data.get("item_id") or item_id)
        return self._last if named is None else named

    def _terminal(self, response: dict[str, Any], found: list[StreamEvent]) -> None:
        usage = responses.read_usage(response.get("usage"))
        if usage is not None:
            found.append(Told(usage))
        reason = _dict(response.get("incomplete_details")).get("reason")
        stop: Stop = "end"
        if self._arguments:
            stop = "tool_calls"
        elif response.get("status") == "incomplete":
            stop = "content_filter" if reason == "content_filter" else "max_tokens"
        elif self._refused:
            stop = "refusal"
        found += [Stopped(stop), Ended()]
