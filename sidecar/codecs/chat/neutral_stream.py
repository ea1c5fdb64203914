"""Chat Completions streams read into the neutral stream events and written from them
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
    Stop,
    Stopped,
    StreamEvent,
    Told,
    Usage,
)
from ..base import as_int
from ..neutral_stream import (
    Caller,
    Content,
    StreamReader,
    StreamWriter,
    dict_of,
    failure_of,
    prefixed,
    str_of,
)
from ..sse import DONE, data_frame
from .neutral import FINISH_TO_STOP, STOP_TO_FINISH, read_usage, write_usage

# The text events every stream is mostly made of, written from bytes around the JSON-encoded
# text (the same bytes orjson writes for the whole event): they cost the most per stream.
_LEGACY = "function_call"  # the key of a Chat stream's legacy call among its indexed ones
_CHAT_TEXT_TAIL = b'},"logprobs":null,"finish_reason":null}]}\n\n'


class ChatStreamReader(StreamReader):
    """``chat.completion.chunk`` events of choice 0 (no other protocol has several choices).

    Servers number calls differently (``stream.py`` lists how): a fragment
    starts a call when its index is new or names another id than its index's call.
    """

    def __init__(self) -> None:
        super().__init__()
        self._started = False
        self._calls: dict[Any, tuple[int, str | None]] = {}  # server index -> (call, its id)
        self._thought = ""  # reasoning_content, out whole before the answer
        self._stop: Stop | None = None

    end_marker = "[DONE]"

    def _events(
        self, events: list[tuple[str | None, dict[str, Any] | None]], found: list[StreamEvent]
    ) -> None:
        for _, chunk in events:
            if chunk is None:  # [DONE]
                self._think(found)
                stop = self._stop or "end"
                found += [Stopped("tool_calls" if self._calls else stop), Ended()]
                return
            if "error" in chunk:
                found.append(failure_of(chunk["error"]))
                return
            self._chunk(chunk, found)

    def _chunk(self, chunk: dict[str, Any], found: list[StreamEvent]) -> None:
        if not self._started:
            self._started = True
            found.append(Started(chunk.get("id"), chunk.get("model"), as_int(chunk.get("created"))))
        usage = chunk.get("usage")
        if usage:
            found.append(Told(read_usage(usage) or Usage()))
        for choice in chunk.get("choices") or ():
            if type(choice) is not dict or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if type(delta) is dict:
                content = delta.get("content")
                if len(delta) == 1 and content and type(content) is str and not self._thought:
                    found.append(content)  # nearly every event: one piece of text
                else:
                    self._delta(delta, found)
            reason = choice.get("finish_reason")
            if reason and type(reason) is str:
                self._stop = FINISH_TO_STOP.get(reason, "end")

    def _delta(self, delta: dict[str, Any], found: list[StreamEvent]) -> None:
        thought = delta.get("reasoning_content")
        if thought and isinstance(thought, str):
            self._thought += thought
        content = delta.get("content")
        if content and isinstance(content, str):
            self._think(found)
            found.append(content)
        refusal = delta.get("refusal")
        if refusal and isinstance(refusal, str):
            self._think(found)
            found.append(Refusal(refusal))
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
        ``neutral.read_reply`` names it."""
        if any(key != _LEGACY for key in self._calls):
            return
        if _LEGACY not in self._calls:
            name = str_of(function_call.get("name"))
            self._calls[_LEGACY] = (len(self._calls), None)
            found.append(CallStarted(self._calls[_LEGACY][0], f"call_{name or 'function'}", name))
        if arguments := str_of(function_call.get("arguments")):
            found.append(CallArguments(self._calls[_LEGACY][0], arguments))

    def _fragment(self, fragment: dict[str, Any], found: list[StreamEvent]) -> None:
        call_id = fragment.get("id") if isinstance(fragment.get("id"), str) else None
        index = fragment.get("index")
        function = dict_of(fragment.get("function"))
        known = self._calls.get(index)
        if known is None or (call_id and known[1] not in (None, call_id)):
            known = self._calls[index] = (len(self._calls), call_id)
            # Ids are the caller's to send back: one is made where a server gave none.
            call = CallStarted(
                known[0], call_id or f"call_{known[0]}", str_of(function.get("name"))
            )
            found.append(call)
        if arguments := str_of(function.get("arguments")):
            found.append(CallArguments(known[0], arguments))


class ChatStreamWriter(StreamWriter):
    """``chat.completion.chunk`` events for choice 0, the usage chunk when the caller asked
    for it (``stream_options.include_usage``), then ``[DONE]``."""

    def __init__(self, caller: Caller) -> None:
        super().__init__(caller)
        self._calls: dict[int, int] = {}  # source call -> tool_calls index
        self._text_head = b""  # a text chunk up to its text, once the ids are known

    def _open(self) -> bytes:
        opening = self._chunk({"role": "assistant", "content": ""})
        self._text_head = opening[: opening.index(b'{"role"')] + b'{"content":'
        return opening

    def _content(self, event: Content) -> bytes:
        if type(event) is str:
            # The common chunk, written from its parts: its head is the same every time.
            return self._text_head + orjson.dumps(event) + _CHAT_TEXT_TAIL
        if isinstance(event, Reasoning):
            return b""  # Chat Completions has no place for reasoning
        if isinstance(event, Refusal):
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
        finish = STOP_TO_FINISH[self._stop_reason(bool(self._calls))]
        frames = [self._chunk({}, finish)]
        if self._caller.include_usage:
            usage = write_usage(self._usage)
            frames.append(data_frame({**self._ids(), "choices": [], "usage": usage}))
        frames.append(DONE)
        return b"".join(frames)

    def _failure(self, err: ApiError) -> bytes:
        return data_frame(self._caller.error_body(err)) + DONE

    def _ids(self) -> dict[str, Any]:
        head = self._head
        return {
            "id": prefixed("chatcmpl-", head.id),
            "object": "chat.completion.chunk",
            "created": head.created,
            "model": head.model or "",
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return data_frame({**self._ids(), "choices": [choice]})


def stream_head(body: dict[str, Any]) -> dict[str, Any]:
    """What a streamed answer says about itself before its content, from the answer so far."""
    return {key: body[key] for key in ("id", "created", "model", "object")}


# An answer of one message: no list of parts a text delta names its place in.
ANSWER_PARTS = None

WRITER = ChatStreamWriter
READER = ChatStreamReader
