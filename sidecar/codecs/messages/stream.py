"""Messages streams: one upstream turn read as it arrives, and the client's one
``message_start`` … ``message_stop`` lifecycle across every turn of a mediated request."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson

from ...model.conversation import CodecError
from ...model.errors import ApiError
from ..sse import event_frame
from ..streaming import ClientStream, TextDelta, TurnAssembler

# A text block's next piece, most of a stream's events, written from bytes around its
# JSON-encoded text: the same bytes ``event_frame`` writes for the whole event.
TEXT_DELTA_HEAD = (
    b"event: content_block_delta\ndata: "
    b'{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":'
)
TEXT_DELTA_TAIL = b"}}\n\n"
Render = Callable[[dict[str, Any]], list[bytes]]
BlockEvents = Callable[[int, dict[str, Any]], list[bytes]]


class MessagesAssembler(TurnAssembler):
    def __init__(self) -> None:
        super().__init__()
        self._message: dict[str, Any] | None = None
        self._buffers: dict[int, str] = {}  # input_json_delta pieces per block
        self._handed = 0  # blocks before this one were handed out or stay for the end
        self._finished = False

    def _event(self, event: str | None, payload: str, deltas: list[TextDelta]) -> None:
        data = orjson.loads(payload)
        kind = data.get("type", event)
        if kind == "error":
            raise CodecError(f"upstream stream error: {data.get('error')}")
        message = self._message
        if kind == "message_start":
            self._message = copy.deepcopy(data["message"])
            self.head = copy.deepcopy(data["message"])
        elif message is None:
            return
        elif kind == "content_block_start":
            message["content"].append(copy.deepcopy(data["content_block"]))
        elif kind == "content_block_delta":
            index, delta = data["index"], data["delta"]
            _apply_delta(message["content"][index], delta, self._buffers, index)
            if delta.get("type") == "text_delta" and delta.get("text"):
                before: tuple[dict[str, Any], ...] = ()
                if index >= self._handed:  # the block's first text
                    earlier = message["content"][self._handed : index]
                    before = tuple(b for b in earlier if goes_before_text(b))
                    self._handed = index + 1
                deltas.append(TextDelta((index,), delta["text"], before=before))
        elif kind == "content_block_stop":
            raw = self._buffers.pop(data["index"], "")
            if raw:
                message["content"][data["index"]]["input"] = orjson.loads(raw)
        elif kind == "message_stop":
            self._finished = True
        elif kind == "message_delta":
            message.update(data.get("delta") or {})
            message["usage"] = {**message.get("usage", {}), **(data.get("usage") or {})}

    def _body(self) -> dict[str, Any]:
        if self._message is None:
            raise CodecError("upstream stream carried no message_start")
        if not self._finished:
            # A cut stream would fold into a plausible but partial answer.
            raise CodecError("upstream stream ended before message_stop")
        return self._message


class MessagesClientStream(ClientStream):
    """Each upstream text block with text becomes a client text block, numbered across turns;
    the answer's other blocks follow at the end, then the stop reason and summed usage."""

    def __init__(
        self, render: Render, block_events: BlockEvents, error: Callable[[ApiError], bytes]
    ) -> None:
        self._render = render
        self._block_events = block_events
        self._error = error
        self._blocks = 0  # client blocks opened so far
        self._open_blocks: dict[int, int] = {}  # upstream block -> client block, this turn

    def _open(self, head: dict[str, Any]) -> bytes:
        start = {k: v for k, v in head.items() if k not in ("content", "stop_reason", "usage")}
        start.update(content=[], stop_reason=None, stop_sequence=None, usage=head.get("usage"))
        return event_frame("message_start", {"type": "message_start", "message": start})

    def _text(self, deltas: list[TextDelta]) -> bytes:
        frames: list[bytes] = []
        for delta in deltas:
            index = self._open_blocks.get(delta.part[0])
            if index is None:
                frames.append(self._close_blocks())
                for block in delta.before:
                    frames += self._block_events(self._blocks, block)
                    self._blocks += 1
                index = self._open_blocks[delta.part[0]] = self._blocks
                self._blocks += 1
                block = {"type": "text", "text": ""}
                start = {"type": "content_block_start", "index": index, "content_block": block}
                frames.append(event_frame("content_block_start", start))
            frames.append(TEXT_DELTA_HEAD % index + orjson.dumps(delta.text) + TEXT_DELTA_TAIL)
        return b"".join(frames)

    def end_turn(self, body: dict[str, Any]) -> bytes:
        return self._close_blocks()

    def _close_blocks(self) -> bytes:
        frames = [
            event_frame("content_block_stop", {"type": "content_block_stop", "index": index})
            for index in self._open_blocks.values()
        ]
        self._open_blocks = {}
        return b"".join(frames)

    def finish(self, answer: dict[str, Any]) -> bytes:
        if not self.opened:
            return b"".join(self._render(answer))
        frames: list[bytes] = []
        content = answer.get("content") or []
        for index in range(self._blocks, len(content)):
            frames += self._block_events(index, content[index])
        stop = {
            "stop_reason": answer.get("stop_reason"),
            "stop_sequence": answer.get("stop_sequence"),
        }
        usage = answer.get("usage") or {}
        frames.append(
            event_frame("message_delta", {"type": "message_delta", "delta": stop, "usage": usage})
        )
        frames.append(event_frame("message_stop", {"type": "message_stop"}))
        return b"".join(frames)

    def fail(self, err: ApiError) -> bytes:
        return self._error(err)


def goes_before_text(block: dict[str, Any]) -> bool:
    """Shown ahead of the text after it: anything but text and the calls someone executes."""
    return block.get("type") not in ("text", "tool_use")


def has_text(block: dict[str, Any]) -> bool:
    return block.get("type") == "text" and bool(block.get("text"))


def _apply_delta(
    block: dict[str, Any], delta: dict[str, Any], buffers: dict[int, str], index: int
) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + delta.get("text", "")
    elif kind == "input_json_delta":
        buffers[index] = buffers.get(index, "") + delta.get("partial_json", "")
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
    elif kind == "signature_delta":
        block["signature"] = delta.get("signature", "")
    elif kind == "citations_delta":
        block.setdefault("citations", []).append(delta.get("citation"))
