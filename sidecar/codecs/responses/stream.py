"""Responses streams: one upstream response read as it arrives, and the client's one
``response.created`` … ``response.completed`` lifecycle (strictly increasing
``sequence_number``) across every call of a mediated request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import orjson

from ...model.conversation import CodecError
from ...model.errors import ApiError
from ..streaming import ClientStream, TextDelta, TurnAssembler

TERMINAL_EVENTS = ("response.completed", "response.failed", "response.incomplete")


def goes_before_text(item: dict[str, Any]) -> bool:
    """Shown ahead of the text after it: reasoning, provider-run tools; not messages and not
    the calls someone executes."""
    return item.get("type") not in ("message", "function_call", "custom_tool_call")


def text_parts(item: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        part
        for part in item.get("content") or []
        if isinstance(part, dict) and part.get("type") == "output_text" and part.get("text")
    ]


def has_text(item: dict[str, Any]) -> bool:
    """A message with text: the client saw it as it streamed."""
    return item.get("type") == "message" and bool(text_parts(item))


class Lifecycle(Protocol):
    """Numbers the events of one stream (the codec's)."""

    sequence: int
    """The next event's ``sequence_number``."""

    def event(self, kind: str, fields: dict[str, Any]) -> bytes: ...

    def item(self, index: int, item: dict[str, Any]) -> list[bytes]: ...


class ResponsesAssembler(TurnAssembler):
    """Lenient with what compatible servers leave out: ``llama-server`` sends no
    ``output_index``, ``content_index`` or ``sequence_number`` and no id on a call's item; an
    event without an index belongs to the item its ``item_id`` names, else to the last added."""

    def __init__(self) -> None:
        super().__init__()
        self._added: dict[int, dict[str, Any]] = {}  # items as the stream opened them
        self._done_items: dict[int, dict[str, Any]] = {}
        self._response: dict[str, Any] | None = None
        self._handed = 0  # items before this one were handed out or stay for the end

    def _event(self, event: str | None, payload: str, deltas: list[TextDelta]) -> None:
        if self._response is not None:
            return
        data = orjson.loads(payload)
        kind = data.get("type")
        if kind == "error":
            raise CodecError(f"upstream stream error: {data.get('message')}")
        if kind == "response.failed":
            error = (data.get("response") or {}).get("error")
            raise CodecError(f"upstream response failed: {error}")
        if kind == "response.created":
            self.head = dict(data["response"])
        elif kind == "response.output_item.added":
            index = data.get("output_index", len(self._added))
            self._added[index] = data.get("item") or {}
        elif kind == "response.output_text.delta" and data.get("delta"):
            index = self._index_of(data, data.get("item_id"))
            before: tuple[dict[str, Any], ...] = ()
            if index >= self._handed:  # the item's first text
                earlier = (self._done_items.get(i, {}) for i in range(self._handed, index))
                before = tuple(i for i in earlier if goes_before_text(i))
                self._handed = index + 1
            where = (index, data.get("content_index", 0))
            item_id = data.get("item_id") or _identity(self._added.get(index, {}))
            deltas.append(TextDelta(where, data["delta"], item_id, before))
        elif kind == "response.output_item.done":
            item = data["item"]
            if "output_index" in data or _identity(item) in map(_identity, self._added.values()):
                index = self._index_of(data, _identity(item))
            else:  # an item the stream never opened: the next one
                index = max([*self._added, *self._done_items], default=-1) + 1
            self._done_items[index] = item
        elif kind in TERMINAL_EVENTS:
            response = dict(data["response"])
            if not response.get("output"):
                # Some servers leave the final output to the item events.
                done = self._done_items
                response["output"] = [done[i] for i in sorted(done)]
            self._response = response

    def _index_of(self, data: dict[str, Any], item_id: str | None) -> int:
        """The event's output index, or the position of the item it names, or the last
        item opened (a server that neither numbers nor names its items has one at a time)."""
        if "output_index" in data:
            return int(data["output_index"])
        if item_id is not None:
            for index, item in self._added.items():
                if _identity(item) == item_id:
                    return index
        return max(self._added, default=0)

    def _body(self) -> dict[str, Any]:
        if self._response is None:
            # A cut stream would fold into a plausible but partial answer.
            raise CodecError("upstream stream ended before response.completed")
        return self._response


def _identity(item: dict[str, Any]) -> str | None:
    """What names an item in other events: its id, or a call's ``call_id`` where it has none."""
    return item.get("id") or item.get("call_id")


TEXT_DELTA = "response.output_text.delta"
TEXT_DELTA_TAIL = b',"logprobs":[],"sequence_number":%d}\n\n'


def text_delta_head(where: dict[str, Any], content_index: int) -> bytes:
    """A text part's ``response.output_text.delta`` frame up to its text: the same bytes
    ``Lifecycle.event`` writes for the whole event (``{"type", **fields, "sequence_number"}``);
    ``TEXT_DELTA_TAIL`` (with the event's number) ends it."""
    fields = orjson.dumps({"type": TEXT_DELTA, **where, "content_index": content_index})
    return b"event: " + TEXT_DELTA.encode() + b"\ndata: " + fields[:-1] + b',"delta":'


class ResponsesClientStream(ClientStream):
    """Each upstream message item with text becomes a client message item, numbered across
    calls and closed when its call ends; the answer's other items follow at the end."""

    def __init__(
        self,
        lifecycle: Lifecycle,
        render: Callable[[dict[str, Any]], list[bytes]],
        as_client_sees: Callable[[dict[str, Any]], dict[str, Any]],
        failure: Callable[[ApiError], bytes],
        *,
        live: bool,
    ) -> None:
        """``live``: text goes out as it comes. The lifecycle keeps one response id (SDKs check
        it), so where the provider chains responses by id, the client must get the final
        call's id: then the answer goes out whole at the end."""
        self._live = live
        self._lifecycle = lifecycle
        self._render = render
        self._as_client_sees = as_client_sees
        self._failure = failure
        self._started: dict[str, Any] = {}
        self._items = 0  # client output items so far
        self._turn_items: dict[int, tuple[int, str | None]] = {}  # upstream -> client, item id
        # upstream part -> [client index, its text so far, its delta frame's head]
        self._parts: dict[tuple[int, int], list[Any]] = {}

    def text(self, head: dict[str, Any], deltas: list[TextDelta]) -> bytes:
        return super().text(head, deltas) if self._live else b""

    def _open(self, head: dict[str, Any]) -> bytes:
        self._started = {
            **self._as_client_sees(head),
            "status": "in_progress",
            "output": [],
            "usage": None,
        }
        event = self._lifecycle.event
        return event("response.created", {"response": self._started}) + event(
            "response.in_progress", {"response": self._started}
        )

    def _text(self, deltas: list[TextDelta]) -> bytes:
        event = self._lifecycle.event
        frames: list[bytes] = []
        for delta in deltas:
            upstream_item = delta.part[0]
            for item in delta.before:
                frames += self._lifecycle.item(self._items, item)
                self._items += 1
            if upstream_item not in self._turn_items:
                self._turn_items[upstream_item] = (self._items, delta.item_id)
                item = {"id": delta.item_id, "type": "message", "status": "in_progress"}
                item.update(content=[], role="assistant")
                at = {"output_index": self._items, "item": item}
                frames.append(event("response.output_item.added", at))
                self._items += 1
            index, item_id = self._turn_items[upstream_item]
            where = {"item_id": item_id, "output_index": index}
            part = self._parts.get(delta.part)
            if part is None:
                position = sum(1 for i, _ in self._parts if i == upstream_item)
                part = self._parts[delta.part] = [position, "", text_delta_head(where, position)]
                empty = {"type": "output_text", "text": "", "annotations": []}
                added = {**where, "content_index": position, "part": empty}
                frames.append(event("response.content_part.added", added))
            part[1] += delta.text
            # Most of a stream: the event written from bytes around its JSON-encoded text.
            sequence = self._lifecycle.sequence
            self._lifecycle.sequence = sequence + 1
            text = orjson.dumps(delta.text)
            frames.append(part[2] + text + TEXT_DELTA_TAIL % sequence)
        return b"".join(frames)

    def end_turn(self, body: dict[str, Any]) -> bytes:
        event = self._lifecycle.event
        output = body.get("output") or []
        frames: list[bytes] = []
        for upstream_item, (index, item_id) in self._turn_items.items():
            item = output[upstream_item] if upstream_item < len(output) else {}
            content = item.get("content") or []
            where = {"item_id": item_id, "output_index": index}
            shown = []
            for (of_item, upstream_part), (position, text, _head) in self._parts.items():
                if of_item != upstream_item:
                    continue
                part = content[upstream_part] if upstream_part < len(content) else {}
                part = {"type": "output_text", "annotations": [], **part, "text": text}
                shown.append(part)
                at = {**where, "content_index": position}
                frames.append(event("response.output_text.done", {**at, "text": text}))
                frames.append(event("response.content_part.done", {**at, "part": part}))
            done = {**item, "id": item_id, "type": "message", "content": shown}
            frames.append(event("response.output_item.done", {"output_index": index, "item": done}))
        self._turn_items, self._parts = {}, {}
        return b"".join(frames)

    def finish(self, answer: dict[str, Any]) -> bytes:
        if not self.opened:
            return b"".join(self._render(answer))
        output = answer.get("output") or []
        frames = [
            f for i in range(self._items, len(output)) for f in self._lifecycle.item(i, output[i])
        ]
        terminal = "response.incomplete" if answer.get("status") == "incomplete" else None
        completed = {**answer, "id": self._started.get("id")}  # one identity per lifecycle
        frames.append(
            self._lifecycle.event(terminal or "response.completed", {"response": completed})
        )
        return b"".join(frames)

    def fail(self, err: ApiError) -> bytes:
        if not self.opened:
            return self._failure(err)
        failed = {**self._started, "status": "failed"}
        failed["error"] = {"code": err.code, "message": err.message}
        return self._lifecycle.event("response.failed", {"response": failed})
