"""A target's SSE stream read into stream events (``stream_events.py``), one reader per
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

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import orjson

from ..codecs.base import as_int
from ..codecs.sse import EventReader, NotUtf8
from ..model.conversation import CodecError
from . import chat, messages, responses
from ._text_runs import FREE, NUMBER, RunReader
from .ir import Part, Stop, Usage
from .stream_events import (
    CallArguments,
    CallStarted,
    Ended,
    Failed,
    Reasoning,
    Started,
    Stopped,
    StreamEvent,
    Text,
    Told,
)

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
        """Sees every event parsed (a usage reader: ``codecs/usage.py``); the text events read
        from the template, never parsed, hold nothing but text."""
        self._template: _TextTemplate | None = None

    @property
    def reads_text_runs(self) -> bool:
        """Text events may be read as runs (``read_text_run``): a template was learnt, the
        stream goes on, its lines end in LF and a text event would make a text alone. Only
        what is read one event at a time changes it."""
        template = self._template
        return (
            template is not None
            and template.reads_runs
            and not self.ended
            and not self.malformed
            and self._reader.ends_lines_in_lf
            and self._texts_only()
        )

    def take_back(self) -> bytes:
        """The start of an event read so far, given back to be read again with its rest."""
        return self._reader.take_back()

    def hold(self, start: bytes) -> bool:
        """Whether ``start``, at an event's start, only begins one: then it is read with its
        rest (``EventReader.hold``)."""
        return self._reader.hold(start)

    def completes_nothing(self, data: bytes) -> bool:
        """``data`` cannot complete the event begun (``EventReader.completes_nothing``)."""
        return self._reader.completes_nothing(data)

    def read_text_run(self, data: bytes) -> tuple[list[bytes], int]:
        """The texts of the text events ``data`` starts with, read as one run
        (``_TextTemplate.read_run``), and the bytes they take; none when a text event is not
        all they would say. Only while ``reads_text_runs``, at an event's start (``data``
        after what ``take_back`` gave)."""
        texts, events, used = self._template.read_run(data)  # type: ignore[union-attr]
        self.events += events
        return texts, used

    def _texts_only(self) -> bool:
        """A text event would make one text event and nothing else."""
        return True

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
        """An event's payload parsed, and shown to ``watch``."""
        data = _object(payload)
        if self.watch is not None:
            self.watch(data)
        return data


def _object(payload: str) -> dict[str, Any]:
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"an event is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CodecError("an event is not a JSON object")
    return data


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


# The kinds of a template's slots, the places its events differ in: the text, and the compiled
# run reader's two others, FREE (a plain string) and NUMBER (an integer).
_TEXT = 0
# A slot: the template's payload after its value (up to the next value or the end), its kind.
_Slot = tuple[str, int]
_PROBE = "probe"
# What stands between a key and its value: orjson's and most servers', and Python's json.dumps
# default (llama-cpp-python writes its chunks with it).
_COLONS = (":", ": ")


class _TextTemplate:
    """A text event's payload around its text, learnt from one event read whole: a later
    payload of the same bytes around a JSON string is the same event with that text, read
    without parsing the rest (most events of a stream differ only in their text; parsing each
    was a third of a translated stream's cost). Learnt only when a probe proves it: the
    payload with other values in its slots parses to the same event with those values.

    Two other fields of the event may differ from event to event, wherever they stand, their
    values ignored by the reader: ``free``, a string (OpenAI's per-chunk ``obfuscation``),
    only checked to be a plain JSON string, and ``numbered``, an integer (a Responses event's
    ``sequence_number``), only checked to be one as JSON writes it. A provider whose text
    events differ elsewhere too never matches: after a few templates that never matched, it
    stops learning and every event is read whole.

    Each value ends where the template's next bytes first stand after it; what is between is
    then checked to be what the reader would parse there (a JSON string, a plain string, an
    integer), or the event is read whole. A value found to end beyond its own (an event of
    other bytes after it) holds a quote, a control character or a non-digit, and fails."""

    __slots__ = (
        "_free",
        "_head",
        "_learns",
        "_numbered",
        "_prefix",
        "_run_head",
        "_runs",
        "_tail",
        "_text_end",
        "_text_start",
    )

    def __init__(self, free: str | None = None, numbered: str | None = None) -> None:
        self._free = free
        self._numbered = numbered
        self._head: str | None = None  # ``read``'s: the payload up to its text's quote
        self._tail = ""  # after the text; with a free field, up to its value's opening quote
        self._text_start = 0  # len(head)
        self._text_end = 0  # -len(tail), or 0 with a free field
        self._runs: RunReader | None = None
        self._run_head = b""  # the payload up to the runs' first value
        self._learns = 3  # templates it may still learn before one matches
        self._prefix = b""  # a run's events' start, their event line included (``learn``)

    def read(self, payload: str) -> str | None:
        """The text of a payload the template fits; None: it does not (read it whole). Only
        a text with nothing after it but fixed bytes, or a free field last: a Responses
        delta's three slots cost more to read past than its JSON to parse."""
        head = self._head
        if head is None or not payload.startswith(head):
            return None
        if self._text_end:
            if not payload.endswith(self._tail):
                return None
            literal = payload[self._text_start : self._text_end]
        else:  # the tail, then the free field's value and the event's end
            end = payload.find(self._tail, self._text_start)
            free = payload[end + len(self._tail) : -2]
            if end < 0 or not payload.endswith('"}') or not _plain(free):
                return None
            literal = payload[self._text_start : end]
        try:
            text = orjson.loads(literal)
        except orjson.JSONDecodeError:
            return None
        if type(text) is not str:
            return None
        self._learns = 3
        return text

    @property
    def reads_runs(self) -> bool:
        return self._runs is not None

    def read_run(self, data: bytes) -> tuple[list[bytes], int, int]:
        """The events at the start of ``data`` that ``read`` would read, as one run: the
        non-empty texts among them as orjson writes them (JSON string literals, quotes
        included), how many events they are and the bytes they take. For the run of text
        events a stream mostly is: read in compiled code (``_text_runs.c``), every event's
        values checked there (no control character, valid UTF-8, plain free values, integers);
        a run that fails is left to ``read``, event by event."""
        runs = self._runs
        if runs is None or not data:
            return [], 0, 0
        prefix = self._prefix  # the last run's
        if not data.startswith(prefix):
            prefix = self._run_prefix(data)
            if prefix is None:
                return [], 0, 0  # another event, or the rest of one (after each run of a piece)
        run = runs.read(data, prefix)
        if run is None:
            return [], 0, 0
        texts, events, used, escaped = run
        if escaped:
            texts = _as_orjson_writes(texts)
            if texts is None:
                return [], 0, 0
        self._learns = 3
        return texts, events, used

    def _run_prefix(self, data: bytes) -> bytes | None:
        """What the events of a run ``data`` starts with start with: the first one's event
        line if it is named (``read`` ignores the name; it is UTF-8 and ends in LF), then the
        template's head; None if that event does not. Kept for the next runs."""
        prefix = b"data: " + self._run_head
        if data.startswith(b"event: "):
            line = data[: data.find(b"\n") + 1]
            if b"\r" in line or not (line.isascii() or _utf8(line)):
                return None
            prefix = line + prefix
        if not data.startswith(prefix):
            return None
        self._prefix = prefix
        return prefix

    def learn(self, payload: str, event: dict[str, Any], holder: dict[str, Any], key: str) -> None:
        """Learn from ``payload`` (read whole into ``event``) whose text is ``holder[key]``."""
        if self._learns <= 0:
            return
        self._learns -= 1
        if not self._learns:  # the templates learnt never matched: read every event whole
            self._head = self._runs = None
            return
        places = self._places(payload, event, holder[key], key)
        if places is None or not self._probe_fits(payload, places, event, holder, key):
            return
        head = payload[: places[0][0]]
        ends = [start for start, _, _ in places[1:]] + [len(payload)]
        slots = [
            (payload[end:next_start], kind)
            for (_, end, kind), next_start in zip(places, ends, strict=True)
        ]
        self._learn_read(head, slots)
        self._run_head = head.encode()
        # Never a placeholder: events that start with it are read as the template's.
        self._prefix = b"data: " + self._run_head
        self._runs = _run_reader(slots)

    def _learn_read(self, head: str, slots: list[_Slot]) -> None:
        """``read``'s head and tail (before and after the text's quotes), for a text last or
        followed by the free field alone, last."""
        self._head = None
        text_after = slots[0][0][1:]  # the bytes after the text's closing quote
        if len(slots) == 1:
            self._tail, self._text_end = text_after, -len(text_after)
        elif slots[1:] == [('"}', FREE)]:
            self._tail, self._text_end = text_after, 0
        else:
            return
        if slots[0][1] == _TEXT:
            self._head, self._text_start = head[:-1], len(head) - 1

    def _places(
        self, payload: str, event: dict[str, Any], text: str, key: str
    ) -> list[tuple[int, int, int]] | None:
        """Where the text's value, and the free and numbered fields' if the event has them,
        stand in ``payload`` (a string's without its quotes), in order; None: not as orjson
        writes them (after a colon, or a colon and a space), or overlapping."""
        fields = [(key, orjson.dumps(text).decode(), _TEXT)]
        free = event.get(self._free) if self._free else None
        if type(free) is str and _plain(free):
            fields.append((self._free, f'"{free}"', FREE))
        number = event.get(self._numbered) if self._numbered else None
        if type(number) is int:
            fields.append((self._numbered, str(number), NUMBER))
        places = []
        for name, literal, kind in fields:
            for colon in _COLONS:
                start = payload.find(f'"{name}"{colon}{literal}')
                if start >= 0:
                    break
            else:
                return None  # written otherwise (escapes, other spacing)
            start += len(name) + 2 + len(colon)
            pad = int(kind != NUMBER)
            places.append((start + pad, start + len(literal) - pad, kind))
        places.sort()
        if any(a[1] >= b[0] for a, b in itertools.pairwise(places)):
            return None
        return places

    def _probe_fits(
        self,
        payload: str,
        places: list[tuple[int, int, int]],
        event: dict[str, Any],
        holder: dict[str, Any],
        key: str,
    ) -> bool:
        """The payload with other values in its places parses to the event with those."""
        text = holder[key]
        probes = {
            _TEXT: _PROBE if text != _PROBE else _PROBE * 2,
            FREE: _PROBE if event.get(self._free or "") != _PROBE else _PROBE * 2,
            NUMBER: str(as_int(event.get(self._numbered or "")) + 1),
        }
        pieces, at = [], 0
        for start, end, kind in places:
            pieces += [payload[at:start], probes[kind]]
            at = end
        try:
            probe = orjson.loads("".join(pieces) + payload[at:])
        except orjson.JSONDecodeError:
            return False
        holder[key] = probes[_TEXT]
        expected = dict(event)
        kinds = {kind for _, _, kind in places}
        if FREE in kinds:
            expected[self._free] = probes[FREE]
        if NUMBER in kinds:
            expected[self._numbered] = int(probes[NUMBER])
        fits = probe == expected
        holder[key] = text
        return fits


def _run_reader(slots: list[_Slot]) -> RunReader:
    """The template as runs read it. Values next to each other that are not the text are read
    as one, the bytes between them checked with them: a search less per event (a Responses
    delta's ``obfuscation`` and ``sequence_number``)."""
    values: list[tuple[bytes, tuple[int | bytes, ...] | None]] = []  # following, spec
    for following, kind in slots:
        after = following.encode()
        spec = values[-1][1] if values and kind != _TEXT else None
        if spec is not None:
            between = values[-1][0]
            values[-1] = (after, (*spec, between, kind))
        else:
            values.append((after, None if kind == _TEXT else (kind,)))
    return RunReader(tuple(values))


def _plain(value: str) -> bool:
    """A JSON string's content that needs no escape: read as it stands."""
    return '"' not in value and "\\" not in value and value.isprintable()


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _as_orjson_writes(texts: list[bytes]) -> list[bytes] | None:
    """A run's texts as orjson writes them (escapes its own way), or None if one is not a
    JSON string: a bad escape, or a text found to end past its own (it holds its quote).
    Texts with neither escape nor quote of their own are kept as they are."""
    try:
        return [
            orjson.dumps(orjson.loads(t)) if b"\\" in t or t.count(b'"') != 2 else t for t in texts
        ]
    except orjson.JSONDecodeError:
        return None


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
        self._template = _TextTemplate(free="obfuscation")  # OpenAI's, different every chunk

    def _texts_only(self) -> bool:
        return not self._thought  # reasoning read so far goes out before the next text

    def _event(self, name: str | None, payload: str, found: list[StreamEvent]) -> None:
        if not self._thought and (text := self._template.read(payload)) is not None:
            if text:
                found.append(Text(text))
            return
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
        choices = chunk.get("choices") or ()
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                delta = self._choice(choice, found)
                if delta is not None and len(choices) == 1 and not usage:
                    self._template.learn(payload, chunk, delta, "content")

    def _choice(self, choice: dict[str, Any], found: list[StreamEvent]) -> dict[str, Any] | None:
        """Read one choice; its delta when it is one piece of text and nothing else."""
        delta = choice.get("delta")
        plain = None
        if type(delta) is dict:
            content = delta.get("content")
            if len(delta) == 1 and content and type(content) is str and not self._thought:
                found.append(Text(content))  # the chunk of nearly every event: one piece of text
                plain = delta
            else:
                self._delta(delta, found)
        reason = choice.get("finish_reason")
        if reason and isinstance(reason, str):
            self._stop = chat.FINISH_TO_STOP.get(reason, "end")
            return None
        return plain

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
        self._template = _TextTemplate()

    def _event(self, name: str | None, payload: str, found: list[StreamEvent]) -> None:
        if (text := self._template.read(payload)) is not None:
            if text:
                found.append(Text(text))
            return
        data = self._object(payload)
        kind = data.get("type", name)
        index = as_int(data.get("index"))
        if kind == "content_block_delta":
            delta = _dict(data.get("delta"))
            self._delta(index, delta, found)
            text_delta = delta.get("type") == "text_delta" and type(delta.get("text")) is str
            if text_delta and "type" in data:  # ``read`` ignores the event's name
                self._template.learn(payload, data, delta, "text")
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
        if kind == "text_delta" and (text := _str(delta.get("text"))):
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
        # Every event numbered in turn, OpenAI's chunks obfuscated: neither says anything here.
        # Runs alone read deltas from it (``_TextTemplate.read`` takes no numbered field), and
        # it is learnt from the first deltas read whole until one teaches it.
        self._template = _TextTemplate(free="obfuscation", numbered="sequence_number")
        self._learnt = False

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
            if not self._learnt and "type" in data:  # not named by its event's name alone
                self._template.learn(payload, data, data, "delta")
                self._learnt = self._template.reads_runs
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
