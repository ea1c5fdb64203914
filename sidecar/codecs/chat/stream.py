"""Chat Completions streams: one upstream turn read as it arrives, and the client's one
``chat.completion.chunk`` series across every turn of a mediated request."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from ...model.conversation import CodecError
from ...model.errors import ApiError
from ..sse import data_frame
from ..streaming import ClientStream, TextDelta, TurnAssembler

# The choice the mediation loop reads: only its text is shown live.
ANSWER_CHOICE = 0


class ChatAssembler(TurnAssembler):
    def __init__(self) -> None:
        super().__init__()
        self._states: dict[int, dict[str, Any]] = {}
        self._finished = False

    def _event(self, event: str | None, payload: str, deltas: list[TextDelta]) -> None:
        if self._finished:
            return
        if payload.strip() == "[DONE]":
            self._finished = True
            return
        chunk = orjson.loads(payload)
        if "error" in chunk:
            raise CodecError(f"upstream stream error: {chunk['error']}")
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "created", "model")}
            self.head["object"] = "chat.completion"
        if chunk.get("usage"):
            self.head["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or []:
            _fold_choice(self._states, choice)
            content = (choice.get("delta") or {}).get("content")
            if content and choice.get("index", 0) == ANSWER_CHOICE:
                deltas.append(TextDelta((ANSWER_CHOICE,), content))

    def _body(self) -> dict[str, Any]:
        if not self.head:
            raise CodecError("upstream stream carried no chunks")
        if not self._finished:
            # A cut stream would fold into a plausible but partial answer.
            raise CodecError("upstream stream ended before [DONE]")
        states = self._states
        return {**self.head, "choices": [_finish_choice(states[i]) for i in sorted(states)]}


_TEXT_TAIL = b'},"finish_reason":null}]}\n\n'


class ChatClientStream(ClientStream):
    """Text goes out as it comes; the rest of the answer (calls, refusal, finish reason,
    usage, ``[DONE]``) is rendered by the codec's ``render_stream`` without the text."""

    def __init__(
        self, render: Callable[[dict[str, Any]], list[bytes]], error: Callable[[ApiError], bytes]
    ) -> None:
        self._render = render
        self._error = error
        self._ids: dict[str, Any] = {}
        self._text_head = b""  # a text chunk up to its text, once the ids are known

    def _open(self, head: dict[str, Any]) -> bytes:
        self._ids = {k: head.get(k) for k in ("id", "created", "model")}
        opening = self._chunk({"role": "assistant", "content": ""})
        # Text chunks, most of a stream, are written from bytes around their JSON-encoded
        # text: the same bytes ``_chunk`` writes (a JSON string holds no unescaped quote, so
        # the first ``{"role"`` is the delta's).
        self._text_head = opening[: opening.index(b'{"role"')] + b'{"content":'
        return opening

    def _text(self, deltas: list[TextDelta]) -> bytes:
        head = self._text_head
        return b"".join([head + orjson.dumps(d.text) + _TEXT_TAIL for d in deltas])

    def end_turn(self, body: dict[str, Any]) -> bytes:
        return b""

    def finish(self, answer: dict[str, Any]) -> bytes:
        if not self.opened:
            return b"".join(self._render(answer))
        rest = {**answer, **self._ids}
        rest["choices"] = [_without_text(c) for c in answer.get("choices") or []]
        frames = self._render(rest)
        # Its first chunk opens the answer choice, which is already open.
        return b"".join(frames[1:])

    def fail(self, err: ApiError) -> bytes:
        return self._error(err)

    def _chunk(self, delta: dict[str, Any]) -> bytes:
        choice = {"index": ANSWER_CHOICE, "delta": delta, "finish_reason": None}
        return data_frame({**self._ids, "object": "chat.completion.chunk", "choices": [choice]})


def _without_text(choice: dict[str, Any]) -> dict[str, Any]:
    if choice.get("index", 0) != ANSWER_CHOICE:
        return choice
    return {**choice, "message": {**(choice.get("message") or {}), "content": None}}


def _fold_choice(states: dict[int, dict[str, Any]], choice: dict[str, Any]) -> None:
    index = choice.get("index", 0)
    state = states.setdefault(
        index,
        {"index": index, "content": None, "finish_reason": None, "calls": {}, "announced": {}},
    )
    delta = choice.get("delta") or {}
    if delta.get("content"):
        state["content"] = (state["content"] or "") + delta["content"]
    for fragment in delta.get("tool_calls") or []:
        slot = _slot_of(state, fragment)
        # Some compatible providers repeat id and name on every fragment: keep the first.
        slot["id"] = slot["id"] or fragment.get("id")
        function = fragment.get("function") or {}
        slot["name"] = slot["name"] or function.get("name") or ""
        slot["arguments"] += function.get("arguments") or ""
    function_call = delta.get("function_call")
    if isinstance(function_call, dict):
        legacy = state.setdefault("function_call", {"name": "", "arguments": ""})
        legacy["name"] = legacy["name"] or function_call.get("name") or ""
        legacy["arguments"] += function_call.get("arguments") or ""
    if choice.get("finish_reason"):
        state["finish_reason"] = choice["finish_reason"]


def _slot_of(state: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    """The call a tool-call fragment continues, or a new one. Servers differ: llama-cpp-python
    repeats id and name on every fragment of a call; Ollama numbers every call ``index: 0``
    and sends each whole with its own id; some leave ``index`` out. A fragment opens a new
    call when its index is new, or when it names an id other than its index's current call."""
    calls: dict[int, dict[str, Any]] = state["calls"]
    announced: dict[Any, int] = state["announced"]  # the server's index -> our call
    call_id = fragment.get("id")
    index = fragment.get("index")
    if index is None:  # no index: the call its id names, else the last one
        named = [n for n, c in calls.items() if call_id and c["id"] == call_id]
        if named or (call_id is None and calls):
            return calls[named[0] if named else max(calls)]
    current = announced.get(index)
    if current is None or (call_id and calls[current]["id"] not in (None, call_id)):
        current = announced[index] = len(calls)
        calls[current] = {"id": None, "name": "", "arguments": ""}
    return calls[current]


def _finish_choice(state: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": state["content"]}
    calls = [state["calls"][i] for i in sorted(state["calls"])]
    if calls:
        message["tool_calls"] = [
            {
                "id": c["id"] or f"call_{position}",
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for position, c in enumerate(calls)
        ]
    if "function_call" in state:
        message["function_call"] = state["function_call"]
    # A stream that never says why it stopped but carries tool calls stopped to call them.
    finish = state["finish_reason"] or (
        "tool_calls" if calls else "function_call" if "function_call" in state else "stop"
    )
    return {"index": state["index"], "message": message, "finish_reason": finish}


_EVENT = re.compile(rb".*?(?:\r?\n\r?\n)", re.S)
# A client stream never waits on an event longer than this: past it, bytes pass as they are.
_MAX_PENDING_EVENT = 1 << 20


class UsageChunkStripper:
    """Removes the usage-only chunk (``"choices": []`` with ``usage``) from a passed-through
    stream whose client did not ask for it: the sidecar asks for usage to charge budgets (#32).
    Bytes go on as soon as their event is complete."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        if not self._pending and chunk.endswith(b"\n\n"):
            complete = chunk  # the common case: whole events per chunk
        else:
            data = self._pending + chunk
            cut = max(_end_after(data, b"\n\n"), _end_after(data, b"\r\n\r\n"))
            if cut <= 0:
                self._pending = data if len(data) <= _MAX_PENDING_EVENT else b""
                return b"" if self._pending else data
            complete, self._pending = data[:cut], data[cut:]
        # Asked for usage, OpenAI writes "usage": null into every chunk: look for the one
        # chunk without choices instead.
        if b"[]" not in complete or (
            b'"choices":[]' not in complete and b'"choices": []' not in complete
        ):
            return complete
        return b"".join(e for e in _EVENT.findall(complete) if not _usage_only(e))

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rest


def _end_after(data: bytes, separator: bytes) -> int:
    found = data.rfind(separator)
    return found + len(separator) if found >= 0 else 0


def _usage_only(event: bytes) -> bool:
    for line in event.splitlines():
        if line.startswith(b"data:") and b'"usage"' in line:
            try:
                payload = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                return False
            return isinstance(payload, dict) and payload.get("choices") == []
    return False
