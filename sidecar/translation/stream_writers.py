"""Stream events written out as the caller's SSE, one writer per protocol: the other half of
stream translation (``stream_readers.py``).

Each writer owns one well-formed lifecycle: it opens it once, puts text and call arguments out
as they come, closes each part before the next one opens (the order every provider streams
in), and ends with the protocol's end marker — also when the stream fails, after the failure
in the protocol's own in-band shape. Nothing is written after the end. Usage, stop reasons,
ids and reasoning are written as the whole-answer writers of this package write them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import orjson

from ..codecs.sse import DONE, data_frame, event_frame
from ..model.errors import ApiError
from ..model.neutral import (
    CallArguments,
    CallStarted,
    Ended,
    Failed,
    FunctionTool,
    Part,
    Reasoning,
    Reply,
    Request,
    Started,
    Stop,
    Stopped,
    StreamEvent,
    Text,
    Told,
    Usage,
)
from . import chat, messages, responses

Content = Text | CallStarted | CallArguments | Reasoning
_CONTENT = (Text, CallStarted, CallArguments, Reasoning)
# The text events every stream is mostly made of, written from bytes around the JSON-encoded
# text (the same bytes orjson writes for the whole event): they cost the most per stream.
_MESSAGES_TEXT_HEAD = (
    b"event: content_block_delta\ndata: "
    b'{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":'
)
_MESSAGES_TEXT_TAIL = b"}}\n\n"
_RESPONSES_TEXT_HEAD = (
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":'
)
_RESPONSES_TEXT_AT = b',"output_index":%d,"content_index":0,"delta":'
_RESPONSES_TEXT_TAIL = b',"logprobs":[],"sequence_number":%d}\n\n'
_CHAT_TEXT_TAIL = b'},"logprobs":null,"finish_reason":null}]}\n\n'
_TEXT_BLOCK = ("text", -1)  # the Messages writer's open text block, told by identity
# The whole-answer writers render one reasoning part for us; they read no request field for it.
_NO_REQUEST = Request(model=None, system=[], messages=[])


def _written(write_reply: Any, part: Part) -> dict[str, Any]:
    return write_reply(Reply("", None, [part], "end", None), _NO_REQUEST)  # type: ignore[no-any-return]


class StreamWriter(ABC):
    """The caller's one stream lifecycle, written from neutral events."""

    def __init__(self, model: str | None) -> None:
        self._model = model
        self._head = Started(None, model)
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


class ChatStreamWriter(StreamWriter):
    """``chat.completion.chunk`` events for choice 0, the usage chunk when the caller asked
    for it (``stream_options.include_usage``), then ``[DONE]``."""

    def __init__(self, model: str | None, *, include_usage: bool, error_body: Any) -> None:
        super().__init__(model)
        self._include_usage = include_usage
        self._error_body = error_body
        self._calls: dict[int, int] = {}  # source call -> tool_calls index
        self._text_head = b""  # a text chunk up to its text, once the ids are known

    def _open(self) -> bytes:
        opening = self._chunk({"role": "assistant", "content": ""})
        self._text_head = opening[: opening.index(b'{"role"')] + b'{"content":'
        return opening

    def _content(self, event: Content) -> bytes:
        if type(event) is Text and not event.refusal:
            # The common chunk, written from its parts: its head is the same every time.
            return self._text_head + orjson.dumps(event.text) + _CHAT_TEXT_TAIL
        if isinstance(event, Reasoning):
            return b""  # Chat Completions has no place for reasoning
        if isinstance(event, Text):
            return self._chunk({"refusal": event.text})
        if isinstance(event, CallStarted):
            index = self._calls[event.index] = len(self._calls)
            function = {"name": event.name, "arguments": ""}
            call = {"index": index, "id": event.call_id, "type": "function", "function": function}
            return self._chunk({"tool_calls": [call]})
        index = self._calls.get(event.index)
        if index is None:
            return b""  # arguments of a call never started: nothing to attach them to
        piece = {"index": index, "function": {"arguments": event.json}}
        return self._chunk({"tool_calls": [piece]})

    def _end(self) -> bytes:
        finish = chat.STOP_TO_FINISH[self._stop_reason(bool(self._calls))]
        frames = [self._chunk({}, finish)]
        if self._include_usage:
            usage = chat.write_usage(self._usage)
            frames.append(data_frame({**self._ids(), "choices": [], "usage": usage}))
        frames.append(DONE)
        return b"".join(frames)

    def _failure(self, err: ApiError) -> bytes:
        return data_frame(self._error_body(err)) + DONE

    def _ids(self) -> dict[str, Any]:
        head = self._head
        return {
            "id": _prefixed("chatcmpl-", head.id),
            "object": "chat.completion.chunk",
            "created": head.created,
            "model": head.model or "",
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return data_frame({**self._ids(), "choices": [choice]})


class MessagesStreamWriter(StreamWriter):
    """``message_start``, one content block at a time (``text`` or ``tool_use``),
    ``message_delta`` with the stop reason and usage, ``message_stop``. A failure is the
    ``error`` event, which ends a Messages stream."""

    def __init__(self, model: str | None, *, error_body: Any) -> None:
        super().__init__(model)
        self._error_body = error_body
        self._blocks = 0
        self._open_block: tuple[str, int] | None = None  # ("text", -1) or ("call", source)
        self._calls: dict[int, int] = {}  # source call -> block index
        self._text_head = b""  # the open text block's delta up to its text

    def _open(self) -> bytes:
        head = self._head
        message = {
            "id": _prefixed("msg_", messages.tool_id(head.id or "")),
            "type": "message",
            "role": "assistant",
            "model": head.model or "",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": messages.write_usage(self._usage),
        }
        return event_frame("message_start", {"type": "message_start", "message": message})

    def _content(self, event: Content) -> bytes:
        if type(event) is Text:  # most events: the next piece of the open text block
            if self._open_block is _TEXT_BLOCK:
                return self._text_head + orjson.dumps(event.text) + _MESSAGES_TEXT_TAIL
            start = self._start({"type": "text", "text": ""}, _TEXT_BLOCK)
            self._text_head = _MESSAGES_TEXT_HEAD % (self._blocks - 1)
            return start + self._text_head + orjson.dumps(event.text) + _MESSAGES_TEXT_TAIL
        if isinstance(event, Reasoning):
            blocks = _written(messages.write_reply, event.part)["content"]
            return b"".join(self._whole_block(block) for block in blocks)
        if isinstance(event, CallStarted):
            self._calls[event.index] = self._blocks
            call_id = messages.tool_id(event.call_id)
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
        reason = messages.STOP_TO_WIRE[self._stop_reason(bool(self._calls))]
        delta = {"stop_reason": reason, "stop_sequence": None}
        usage = messages.write_usage(self._usage)
        change = {"type": "message_delta", "delta": delta, "usage": usage}
        return (
            self._stop_block()
            + event_frame("message_delta", change)
            + event_frame("message_stop", {"type": "message_stop"})
        )

    def _failure(self, err: ApiError) -> bytes:
        return event_frame("error", self._error_body(err))


class ResponsesStreamWriter(StreamWriter):
    """``response.created`` … ``response.completed`` with strictly increasing
    ``sequence_number``: one output item at a time (a ``message`` with one ``output_text``
    part, or a ``function_call``), each closed with its ``done`` events and the whole item
    before the next opens (Codex reads calls from ``response.output_item.done``).
    A failure is ``response.failed``, the stream's end.

    ``reshaped``: the caller's tools whose calls go back in a shape of their own, by the name
    the provider saw (``responses.reshaped_tools``). A call of a ``custom`` tool (Codex's
    apply_patch) went to the provider as a function of one string: it is held until complete
    and goes out whole as the ``custom_tool_call`` item the caller offered it as. A call of a
    namespaced function names its namespace and the function's own name."""

    def __init__(self, model: str | None, reshaped: dict[str, FunctionTool] | None = None) -> None:
        super().__init__(model)
        self._sequence = 0
        self._output: list[dict[str, Any]] = []  # items as the caller has them so far
        self._open_item: dict[str, Any] | None = None
        self._calls: dict[int, int] = {}  # source call -> output index
        self._positions: dict[str, int] = {}  # item id -> output index
        self._reshaped = reshaped or {}
        self._held: tuple[int, Part] | None = None  # (source call, the call) of a custom tool
        # The open message's text delta as a format of its text and sequence number, and its
        # text so far as the JSON strings its deltas carry (decoded and joined once it closes:
        # adding each piece to one string copies the answer once per event).
        self._text_format: bytes | None = None
        self._text: list[bytes] = []

    def _open(self) -> bytes:
        started = self._response("in_progress")
        return self._event("response.created", {"response": started}) + self._event(
            "response.in_progress", {"response": started}
        )

    def _content(self, event: Content) -> bytes:
        if type(event) is Text:
            frames = b""
            if self._text_format is None:
                frames = self._open_message()
            text = orjson.dumps(event.text)
            self._text.append(text)
            frame = self._text_format % (text, self._sequence)  # type: ignore[operator]
            self._sequence += 1
            return frames + frame
        if isinstance(event, Reasoning):
            items = _written(responses.write_reply, event.part)["output"]
            return b"".join(self._whole_item(item) for item in items)
        tool = self._reshaped.get(event.name) if isinstance(event, CallStarted) else None
        if tool is not None and tool.freeform:
            frames = self._close_item()
            self._calls[event.index] = -1  # held, not yet an output item
            call = {"type": "tool_call", "id": event.call_id, "name": event.name}
            self._held = (event.index, {**call, "arguments": ""})
            return frames
        if isinstance(event, CallStarted):
            self._calls[event.index] = len(self._output)
            call_item = {
                "id": f"fc_{len(self._output)}_{event.call_id}",
                "type": "function_call",
                "status": "in_progress",
                "call_id": event.call_id,
                "name": event.name,
                "arguments": "",
            }
            if tool is not None and tool.namespace is not None:
                call_item.update(namespace=tool.namespace, name=tool.own_name)
            return self._add(call_item)
        if self._held is not None and self._held[0] == event.index:
            self._held[1]["arguments"] += event.json
            return b""
        index = self._calls.get(event.index)
        if index is None or index < 0:
            return b""
        call = self._output[index]
        call["arguments"] += event.json
        change = {**self._where(call), "delta": event.json}
        return self._event("response.function_call_arguments.delta", change)

    def _whole_item(self, item: dict[str, Any]) -> bytes:
        """An item that is complete when it starts (reasoning): added, then done."""
        frames = self._add(item)
        self._open_item = None
        at = {"output_index": self._positions[item["id"]], "item": item}
        return frames + self._event("response.output_item.done", at)

    def _open_message(self) -> bytes:
        message = {
            "id": f"msg_{len(self._output)}_{self._head.id or 'translated'}",
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        frames = self._add(message)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        message["content"].append(part)
        where = self._where(message)
        at = {**where, "content_index": 0, "part": dict(part)}
        item_id = orjson.dumps(where["item_id"]).replace(b"%", b"%%")
        at_index = _RESPONSES_TEXT_AT % where["output_index"]
        self._text_format = _RESPONSES_TEXT_HEAD + item_id + at_index + b"%b" + _RESPONSES_TEXT_TAIL
        self._text = []
        return frames + self._event("response.content_part.added", at)

    def _add(self, item: dict[str, Any]) -> bytes:
        frames = self._close_item()
        self._positions[item["id"]] = len(self._output)
        self._output.append(item)
        self._open_item = item
        added = {"output_index": len(self._output) - 1, "item": dict(item)}
        if item["type"] == "message":
            added["item"]["content"] = []
        return frames + self._event("response.output_item.added", added)

    def _close_item(self) -> bytes:
        if self._held is not None:  # a custom tool's call, now complete
            (_, call), self._held = self._held, None
            request = Request(None, [], [], tools=[_freeform_tool(call["name"])])
            item = responses.write_reply(Reply("", None, [call], "end", None), request)
            return self._whole_item(item["output"][0])
        item, self._open_item = self._open_item, None
        if item is None:
            return b""
        where = self._where(item)
        frames = []
        if item["type"] == "message":
            part = item["content"][0]
            part["text"] = "".join(orjson.loads(b"[%b]" % b",".join(self._text)))
            self._text_format = None
            at = {**where, "content_index": 0}
            text = {**at, "text": part["text"], "logprobs": []}
            frames.append(self._event("response.output_text.done", text))
            frames.append(self._event("response.content_part.done", {**at, "part": part}))
        else:
            done = {**where, "name": item["name"], "arguments": item["arguments"]}
            frames.append(self._event("response.function_call_arguments.done", done))
        item["status"] = "completed"
        frames.append(
            self._event(
                "response.output_item.done", {"output_index": where["output_index"], "item": item}
            )
        )
        return b"".join(frames)

    def _where(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": self._positions[item["id"]]}

    def _end(self) -> bytes:
        frames = self._close_item()
        reason = self._stop_reason(bool(self._calls))
        if reason in ("max_tokens", "content_filter"):
            why = "max_output_tokens" if reason == "max_tokens" else "content_filter"
            response = self._response("incomplete", incomplete_details={"reason": why})
            return frames + self._event("response.incomplete", {"response": response})
        response = self._response("completed")
        return frames + self._event("response.completed", {"response": response})

    def _failure(self, err: ApiError) -> bytes:
        frames = self._close_item()
        error = {"code": err.code, "message": err.message}
        response = self._response("failed", error=error)
        return frames + self._event("response.failed", {"response": response})

    def _response(self, status: str, **fields: Any) -> dict[str, Any]:
        head = self._head
        done = status != "in_progress"
        return {
            "id": _prefixed("resp_", head.id),
            "object": "response",
            "created_at": head.created,
            "status": status,
            "model": head.model or "",
            "output": list(self._output) if done else [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "store": False,
            "usage": responses.write_usage(self._usage) if done else None,
            **fields,
        }

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        frame = event_frame(kind, {"type": kind, **fields, "sequence_number": self._sequence})
        self._sequence += 1
        return frame


def _freeform_tool(name: str) -> FunctionTool:
    return FunctionTool(name, None, {}, freeform=True)


def _prefixed(prefix: str, answer_id: str | None) -> str:
    """The target's id for the answer under the prefix the caller's protocol uses."""
    if not answer_id:
        return f"{prefix}translated"
    return answer_id if answer_id.startswith(prefix) else prefix + answer_id
