"""Responses streams read into the neutral stream events and written from them
(``codecs/neutral_stream.py`` has what every protocol's share)."""

from __future__ import annotations

from typing import Any

import orjson

from ...model.errors import ApiError
from ...model.neutral import (
    CallArguments,
    CallStarted,
    Ended,
    FunctionTool,
    Part,
    Reasoning,
    Refusal,
    Reply,
    Request,
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
from .neutral import INCOMPLETE_REASONS, read_reply, read_stop, read_usage, write_reply, write_usage
from .stream import TEXT_DELTA_TAIL, goes_before_text, text_delta_head


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

    def _events(
        self, events: list[tuple[str | None, dict[str, Any] | None]], found: list[StreamEvent]
    ) -> None:
        for name, data in events:
            self._event(name, data, found)  # type: ignore[arg-type]  # no end marker: a dict
            if found and type(found[-1]) in ENDS:
                return

    def _event(self, name: str | None, data: dict[str, Any], found: list[StreamEvent]) -> None:
        kind = data.get("type", name)
        if kind == "response.created":
            response = dict_of(data.get("response"))
            created = as_int(response.get("created_at"))
            found.append(Started(response.get("id"), response.get("model"), created))
        elif kind == "response.output_item.added":
            self._added(data, dict_of(data.get("item")), found)
        elif kind == "response.output_text.delta" and (text := str_of(data.get("delta"))):
            found.append(text)
        elif kind == "response.refusal.delta" and (text := str_of(data.get("delta"))):
            self._refused = True
            found.append(Refusal(text))
        elif kind == "response.function_call_arguments.delta":
            index = self._index(data)
            if index in self._arguments and (piece := str_of(data.get("delta"))):
                self._arguments[index] += len(piece)
                found.append(CallArguments(index, piece))
        elif kind == "response.output_item.done":
            self._done(data, dict_of(data.get("item")), found)
        elif kind in ("response.completed", "response.incomplete"):
            self._terminal(dict_of(data.get("response")), found)
        elif kind == "response.failed":
            found.append(failure_of(dict_of(data.get("response")).get("error")))
        elif kind == "error":
            found.append(failure_of(data))

    def _added(self, data: dict[str, Any], item: dict[str, Any], found: list[StreamEvent]) -> None:
        index = as_int(data["output_index"]) if "output_index" in data else self._last + 1
        self._last = max(self._last, index)
        self._items[item.get("id") or item.get("call_id")] = index
        if item.get("type") == "function_call":
            self._call(index, item, found)

    def _call(self, index: int, item: dict[str, Any], found: list[StreamEvent]) -> None:
        self._arguments[index] = 0
        call_id = str_of(item.get("call_id")) or f"call_{index}"
        found.append(CallStarted(index, call_id, str_of(item.get("name"))))
        self._rest_of_arguments(index, item, found)

    def _done(self, data: dict[str, Any], item: dict[str, Any], found: list[StreamEvent]) -> None:
        kind = item.get("type")
        if kind == "reasoning":
            reasoning_events(read_reply({"output": [item]}).parts, found)
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
        arguments = str_of(item.get("arguments"))
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
        usage = read_usage(response.get("usage"))
        if usage is not None:
            found.append(Told(usage))
        found += [Stopped(read_stop(response, bool(self._arguments), self._refused)), Ended()]


class ResponsesStreamWriter(StreamWriter):
    """``response.created`` … ``response.completed`` with strictly increasing
    ``sequence_number``: one output item at a time (a ``message`` with one ``output_text``
    part, or a ``function_call``), each closed with its ``done`` events and the whole item
    before the next opens (Codex reads calls from ``response.output_item.done``).
    A failure is ``response.failed``, the stream's end.

    ``Caller.reshaped``: the caller's tools whose calls go back in a shape of their own, by the name
    the provider saw (``neutral.reshaped_tools``). A call of a ``custom`` tool (Codex's
    apply_patch) went to the provider as a function of one string: it is held until complete
    and goes out whole as the ``custom_tool_call`` item the caller offered it as. A call of a
    namespaced function names its namespace and the function's own name."""

    def __init__(self, caller: Caller) -> None:
        super().__init__(caller)
        self._sequence = 0
        self._output: list[dict[str, Any]] = []  # items as the caller has them so far
        self._open_item: dict[str, Any] | None = None
        self._calls: dict[int, int] = {}  # source call -> output index
        self._positions: dict[str, int] = {}  # item id -> output index
        self._held: tuple[int, Part] | None = None  # (source call, the call) of a custom tool
        # The open message's text delta up to its text (``stream.text_delta_head``), and its
        # text so far as the JSON strings its deltas carry (decoded and joined once it closes:
        # adding each piece to one string copies the answer once per event).
        self._text_head: bytes | None = None
        self._text: list[bytes] = []

    def _open(self) -> bytes:
        started = self._response("in_progress")
        return self._event("response.created", {"response": started}) + self._event(
            "response.in_progress", {"response": started}
        )

    def _content(self, event: Content) -> bytes:
        if type(event) is Refusal:  # written as the message's text, as it always was
            event = event.text
        if type(event) is str:
            frames = b""
            if self._text_head is None:
                frames = self._open_message()
            text = orjson.dumps(event)
            self._text.append(text)
            frame = self._text_head + text + TEXT_DELTA_TAIL % self._sequence
            self._sequence += 1
            return frames + frame
        if isinstance(event, Reasoning):
            items = one_part_written(write_reply, event.part)["output"]
            return b"".join(self._whole_item(item) for item in items)
        tool = self._caller.reshaped.get(event.name) if isinstance(event, CallStarted) else None
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
        self._text_head = text_delta_head(where, 0)
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
            item = write_reply(Reply("", None, [call], "end", None), request)
            return self._whole_item(item["output"][0])
        item, self._open_item = self._open_item, None
        if item is None:
            return b""
        where = self._where(item)
        frames = []
        if item["type"] == "message":
            part = item["content"][0]
            part["text"] = "".join(orjson.loads(b"[%b]" % b",".join(self._text)))
            self._text_head = None
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
        why = INCOMPLETE_REASONS.get(self._stop_reason(bool(self._calls)))
        if why is not None:
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
            "id": prefixed("resp_", head.id),
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
            "usage": write_usage(self._usage) if done else None,
            **fields,
        }

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        frame = event_frame(kind, {"type": kind, **fields, "sequence_number": self._sequence})
        self._sequence += 1
        return frame


def _freeform_tool(name: str) -> FunctionTool:
    return FunctionTool(name, None, {}, freeform=True)


def stream_head(body: dict[str, Any]) -> dict[str, Any]:
    """What a streamed answer says about itself before its content, from the answer so far."""
    return {**body, "status": "in_progress", "output": [], "usage": None}


def answer_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts (output items) a text delta names its place among."""
    return body["output"]  # type: ignore[no-any-return]


ANSWER_PARTS = (answer_parts, goes_before_text)

WRITER = ResponsesStreamWriter
READER = ResponsesStreamReader
