"""Messages streams read into the neutral stream events and written from them
(``codecs/neutral_stream.py`` has what every protocol's share)."""

from __future__ import annotations

from typing import Any

import orjson

from ...model.errors import ApiError
from ...model.neutral import (
    CallArguments,
    CallStarted,
    Ended,
    Reasoning,
    Refusal,
    Started,
    Stopped,
    StreamEvent,
    Told,
)
from ..base import as_int
from ..neutral_stream import (
    ENDS,
    Caller,
    Content,
    StreamReader,
    StreamWriter,
    dict_of,
    failure_of,
    one_part_written,
    prefixed,
    reasoning_events,
    str_of,
)
from ..sse import event_frame
from .neutral import (
    STOP_TO_WIRE,
    WIRE_TO_STOP,
    read_reply,
    read_usage,
    tool_id,
    write_reply,
    write_usage,
)
from .stream import TEXT_DELTA_HEAD, TEXT_DELTA_TAIL, goes_before_text

_TEXT_BLOCK = ("text", -1)  # the Messages writer's open text block, told by identity


class MessagesStreamReader(StreamReader):
    """``message_start`` … ``message_stop``: ``text`` blocks are the text, ``tool_use`` blocks
    the calls, ``thinking`` blocks the reasoning; provider-run blocks are dropped."""

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[int, bool] = {}  # tool_use block -> an argument piece was passed
        self._thinking: dict[int, dict[str, Any]] = {}  # reasoning blocks being read
        self._usage: dict[str, Any] = {}

    def _events(
        self, events: list[tuple[str | None, dict[str, Any] | None]], found: list[StreamEvent]
    ) -> None:
        for name, data in events:
            self._event(name, data, found)  # type: ignore[arg-type]  # no end marker: a dict
            if found and type(found[-1]) in ENDS:
                return

    def _event(self, name: str | None, data: dict[str, Any], found: list[StreamEvent]) -> None:
        kind = data.get("type", name)
        if kind == "content_block_delta":
            delta = data.get("delta")
            if type(delta) is not dict:
                return
            if delta.get("type") == "text_delta":  # nearly every event: one piece of text
                text = delta.get("text")
                if text and type(text) is str:
                    found.append(text)
            else:
                self._delta(as_int(data.get("index")), delta, found)
        elif kind == "message_start":
            message = dict_of(data.get("message"))
            found.append(Started(message.get("id"), message.get("model")))
            self._usage = dict_of(message.get("usage"))
        elif kind == "content_block_start":
            block = dict_of(data.get("content_block"))
            self._block_start(as_int(data.get("index")), block, found)
        elif kind == "content_block_stop":
            self._block_stop(as_int(data.get("index")), found)
        elif kind == "message_delta":
            self._usage = {**self._usage, **dict_of(data.get("usage"))}
            usage = read_usage(self._usage)
            if usage is not None:
                found.append(Told(usage))
            reason = dict_of(data.get("delta")).get("stop_reason")
            if isinstance(reason, str):
                found.append(Stopped(WIRE_TO_STOP.get(reason, "end")))
        elif kind == "message_stop":
            found.append(Ended())
        elif kind == "error":
            found.append(failure_of(data.get("error")))

    def _block_start(self, index: int, block: dict[str, Any], found: list[StreamEvent]) -> None:
        kind = block.get("type")
        if kind == "text" and (text := str_of(block.get("text"))):
            found.append(text)
        elif kind == "tool_use":
            self._calls[index] = bool(block.get("input"))
            call_id, name = str_of(block.get("id")), str_of(block.get("name"))
            found.append(CallStarted(index, call_id, name))
            if block.get("input"):  # a block that comes whole
                found.append(CallArguments(index, orjson.dumps(block["input"]).decode()))
        elif kind in ("thinking", "redacted_thinking"):
            self._thinking[index] = dict(block)

    def _delta(self, index: int, delta: dict[str, Any], found: list[StreamEvent]) -> None:
        kind = delta.get("type")
        if kind == "input_json_delta" and index in self._calls:
            piece = str_of(delta.get("partial_json"))
            if piece:
                self._calls[index] = True
                found.append(CallArguments(index, piece))
        elif index in self._thinking:
            block = self._thinking[index]
            if kind == "thinking_delta":
                block["thinking"] = str_of(block.get("thinking")) + str_of(delta.get("thinking"))
            elif kind == "signature_delta":
                block["signature"] = str_of(delta.get("signature"))

    def _block_stop(self, index: int, found: list[StreamEvent]) -> None:
        if self._calls.get(index) is False:
            # A call without arguments streams none; the other protocols carry "{}".
            found.append(CallArguments(index, "{}"))
        block = self._thinking.pop(index, None)
        if block is not None:
            reasoning_events(read_reply({"content": [block]}).parts, found)


class MessagesStreamWriter(StreamWriter):
    """``message_start``, one content block at a time (``text`` or ``tool_use``),
    ``message_delta`` with the stop reason and usage, ``message_stop``. A failure is the
    ``error`` event, which ends a Messages stream."""

    def __init__(self, caller: Caller) -> None:
        super().__init__(caller)
        self._blocks = 0
        self._open_block: tuple[str, int] | None = None  # ("text", -1) or ("call", source)
        self._calls: dict[int, int] = {}  # source call -> block index
        self._text_head = b""  # the open text block's delta up to its text

    def _open(self) -> bytes:
        head = self._head
        message = {
            "id": prefixed("msg_", tool_id(head.id or "")),
            "type": "message",
            "role": "assistant",
            "model": head.model or "",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": write_usage(self._usage),
        }
        return event_frame("message_start", {"type": "message_start", "message": message})

    def _content(self, event: Content) -> bytes:
        if type(event) is Refusal:  # Messages has no refusal: it is the answer's text
            event = event.text
        if type(event) is str:  # most events: the next piece of the open text block
            if self._open_block is _TEXT_BLOCK:
                return self._text_head + orjson.dumps(event) + TEXT_DELTA_TAIL
            start = self._start({"type": "text", "text": ""}, _TEXT_BLOCK)
            self._text_head = TEXT_DELTA_HEAD % (self._blocks - 1)
            return start + self._text_head + orjson.dumps(event) + TEXT_DELTA_TAIL
        if isinstance(event, Reasoning):
            blocks = one_part_written(write_reply, event.part)["content"]
            return b"".join(self._whole_block(block) for block in blocks)
        if isinstance(event, CallStarted):
            self._calls[event.index] = self._blocks
            call_id = tool_id(event.call_id)
            block = {"type": "tool_use", "id": call_id, "name": event.name, "input": {}}
            return self._start(block, ("call", event.index))
        block_index = self._calls.get(event.index)
        if block_index is None:
            return b""
        return self._delta(block_index, {"type": "input_json_delta", "partial_json": event.json})

    def _whole_block(self, block: dict[str, Any]) -> bytes:
        """A block that is complete when it starts (reasoning), as Anthropic streams it."""
        if block.get("type") != "thinking":
            return self._start(block, ("whole", -1)) + self._stop_block()
        start = self._start({"type": "thinking", "thinking": "", "signature": ""}, ("whole", -1))
        index = self._blocks - 1
        thinking = {"type": "thinking_delta", "thinking": block.get("thinking", "")}
        signature = {"type": "signature_delta", "signature": block.get("signature", "")}
        return (
            start
            + self._delta(index, thinking)
            + self._delta(index, signature)
            + self._stop_block()
        )

    def _start(self, block: dict[str, Any], kind: tuple[str, int]) -> bytes:
        frames = self._stop_block()
        start = {"type": "content_block_start", "index": self._blocks, "content_block": block}
        self._open_block = kind
        self._blocks += 1
        return frames + event_frame("content_block_start", start)

    def _stop_block(self) -> bytes:
        if self._open_block is None:
            return b""
        self._open_block = None
        stop = {"type": "content_block_stop", "index": self._blocks - 1}
        return event_frame("content_block_stop", stop)

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> bytes:
        change = {"type": "content_block_delta", "index": index, "delta": delta}
        return event_frame("content_block_delta", change)

    def _end(self) -> bytes:
        reason = STOP_TO_WIRE[self._stop_reason(bool(self._calls))]
        delta = {"stop_reason": reason, "stop_sequence": None}
        usage = write_usage(self._usage)
        change = {"type": "message_delta", "delta": delta, "usage": usage}
        return (
            self._stop_block()
            + event_frame("message_delta", change)
            + event_frame("message_stop", {"type": "message_stop"})
        )

    def _failure(self, err: ApiError) -> bytes:
        return event_frame("error", self._caller.error_body(err))


def stream_head(body: dict[str, Any]) -> dict[str, Any]:
    """What a streamed answer says about itself before its content, from the answer so far."""
    return {**body, "content": [], "stop_reason": None}


def answer_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts (content blocks) a text delta names its place among."""
    return body["content"]  # type: ignore[no-any-return]


ANSWER_PARTS = (answer_parts, goes_before_text)

WRITER = MessagesStreamWriter
READER = MessagesStreamReader
