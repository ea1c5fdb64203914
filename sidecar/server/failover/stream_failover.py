"""Mid-stream failover of a streamed answer's text (SPEC §14).

A pass-through stream of Chat Completions, Messages or Responses whose provider breaks after
text reached the client, but before any tool-call delta and before the client was told the
answer (or its text) is done, is continued by the route's next target: the text so far goes to
it as the assistant's own (Messages: a trailing assistant message, which the model continues;
Chat Completions and Responses: the partial answer and a user message asking for the rest),
and its answer is spliced into the client's stream with the first stream's ids, block indices
and event numbers. The audit record says so (``failover``).

A mediated request's streamed model call is continued alike (:class:`ContinuedStream`): the
continuation, spliced, reads to the turn's assembler as the rest of the first stream, so the
client sees one answer and the engine one turn.

Protocols may differ (contract §18): the watch reads the stream as the caller got it (a
translated stream as its translator wrote it), the rest is asked for in the caller's protocol
and translated for a next target of another (:class:`Crossing`), and that target's stream is
read back in the caller's protocol before it is spliced."""

from __future__ import annotations

import re
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any, Protocol

import orjson

from ...codecs.base import Codec
from ...model.errors import ApiError, upstream_failure
from ...transport import Response, TransportError
from ..providers.upstream import UpstreamError, UpstreamTarget, translate_error
from ..request.exchange import RequestContext
from .failover import open_upstream

CONTINUE = (
    "Your previous answer was cut off. Continue it exactly where it stops, "
    "without repeating any of it and without comment."
)
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_CONTINUED = frozenset({"chat", "messages", "responses"})
# Where each protocol's request keeps the conversation.
_CONVERSATION = {"chat": "messages", "messages": "messages", "responses": "input"}
# What reading an event of another shape than the protocol's raises (a provider's answer may
# be anything).
_NOT_OF_THE_PROTOCOL = (ValueError, TypeError, AttributeError, KeyError, IndexError)
# An event longer than this is no text event of a provider's: it is passed on, never held.
MAX_EVENT_BYTES = 256 * 1024


class Crossing(Protocol):
    """A request's targets of another protocol than its caller's, as a continuation meets
    them (``translated_stream.LiveCall``)."""

    def request(
        self, target: UpstreamTarget, body: dict[str, Any]
    ) -> tuple[UpstreamTarget, bytes] | None:
        """``body`` (the caller's protocol) streamed to ``target`` in its own; None when
        ``target`` speaks the caller's."""

    def caller_stream(self, response: Response) -> Response:
        """The answering target's stream read in the caller's protocol, cut where it was."""


class StreamWatch:
    """What the client was sent of a stream (whole events only): the answer's text, its ids,
    and whether it may still be continued elsewhere."""

    __slots__ = (
        "_pending",
        "continuable",
        "item_id",
        "next_block",
        "open_block",
        "parts",
        "sequence",
        "stream_id",
    )

    def __init__(self) -> None:
        self._pending = b""
        self.parts: list[str] = []
        self.continuable = True
        self.stream_id: Any = None
        self.open_block: int | None = None  # Messages, Responses: the text open at the break
        self.next_block = 0
        self.item_id: Any = None  # Responses: the message item being written
        self.sequence: int | None = None  # Responses: the last event's sequence_number

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def feed(self, protocol: str, released: bytes) -> None:
        if not self.continuable:
            return
        *events, self._pending = _EVENT_END.split(self._pending + released)
        if len(self._pending) > MAX_EVENT_BYTES:
            self.continuable, self._pending = False, b""
            return
        for event in events:
            data = _data_of(event)
            if data is None:
                continue  # a comment, a keep-alive
            if data == b"[DONE]" or not self._read(protocol, data):
                self.continuable = False
                return

    def _read(self, protocol: str, data: bytes) -> bool:
        """Reads one event; False when the answer may no longer be continued."""
        try:
            event = orjson.loads(data)
            if not isinstance(event, dict) or event.get("error") is not None:
                return False
            if protocol == "chat":
                return self._read_chat(event)
            if protocol == "responses":
                return self._read_responses(event)
            return self._read_messages(event)
        except _NOT_OF_THE_PROTOCOL:
            return False  # no answer of the protocol's shape: nothing to continue

    def _read_chat(self, event: dict[str, Any]) -> bool:
        self.stream_id = self.stream_id or event.get("id")
        for choice in event.get("choices") or ():
            delta = choice.get("delta") or {}
            if choice.get("index", 0) != 0 or choice.get("finish_reason"):
                return False  # several choices, or the client was told this one is done
            if delta.get("tool_calls") or delta.get("function_call"):
                return False
            if isinstance(delta.get("content"), str):
                self.parts.append(delta["content"])
        return True

    def _read_messages(self, event: dict[str, Any]) -> bool:
        kind = event.get("type")
        if kind == "message_start":
            self.stream_id = (event.get("message") or {}).get("id")
        elif kind == "content_block_start":
            if (event.get("content_block") or {}).get("type") != "text":
                return False  # a tool call, thinking: never continued
            self.open_block = event.get("index")
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") != "text_delta":
                return False
            self.parts.append(delta.get("text") or "")
        elif kind == "content_block_stop":
            self.open_block = None
            self.next_block = int(event.get("index") or 0) + 1
        elif kind != "ping":
            return False  # message_delta, message_stop: the client was told it is done
        return True

    def _read_responses(self, event: dict[str, Any]) -> bool:
        kind = event.get("type")
        if isinstance(event.get("sequence_number"), int):
            self.sequence = event["sequence_number"]
        if kind in ("response.created", "response.in_progress"):
            self.stream_id = (event.get("response") or {}).get("id")
        elif kind == "response.output_item.added":
            item = event.get("item") or {}
            if item.get("type") != "message" or self.item_id is not None:
                return False  # a tool call, reasoning, a second item: never continued
            self.item_id, self.open_block = item.get("id"), event.get("output_index")
        elif kind == "response.content_part.added":
            if (event.get("part") or {}).get("type") != "output_text" or self.parts:
                return False
        elif kind == "response.output_text.delta":
            delta = event.get("delta")
            if event.get("item_id") != self.item_id or not isinstance(delta, str):
                return False
            self.parts.append(delta)
        else:
            return False  # a part, an item or the response done: the client was told so
        return True


def may_continue(ctx: RequestContext) -> bool:
    """``ctx``'s stream could be continued by another target."""
    return ctx.caller.codec.name in _CONTINUED and bool(_targets_after(ctx))


def watch_for(ctx: RequestContext) -> StreamWatch | None:
    """A watch when ``ctx``'s stream could be continued by another target, else None."""
    return StreamWatch() if may_continue(ctx) else None


async def reopen(
    ctx: RequestContext,
    watch: StreamWatch,
    raw: bytes | bytearray | None,
    cause: str,
    crossing: Crossing | None = None,
) -> Response | None:
    """The rest of the answer from the route's next targets, or None (nothing to continue,
    no target answered with a stream). Sets the audit record's ``failover``. ``crossing``:
    the request has targets of another protocol (the answer is the target's own stream:
    ``crossing.caller_stream`` reads it in the caller's)."""
    rest = _targets_after(ctx)
    asks = _continuations(ctx.caller.codec.name, raw, watch) if watch.continuable and rest else []
    if not asks:
        return None
    was = ctx.ledger.provider_name, ctx.ledger.model
    ctx.state.metrics.count_failover(was[0] or "", "stream_cut")
    upstream: Response | None = None
    for body in asks:
        answer, form = await _ask(ctx, rest, body, asks[-1], crossing)
        if answer is None or is_stream(answer):
            upstream = answer
            break
        answer.release()
        # A 400 refuses the form (Claude 4.6 and later refuse a prefill): the next is tried.
        if answer.status != 400 or form is asks[-1]:
            break
    if upstream is None:
        ctx.ledger.provider_name, ctx.ledger.model = was  # the stream that broke is the answer
        return None
    record = {"after_text": len(watch.text), "from": was[0], "to": ctx.ledger.provider_name}
    record["cause"] = cause
    ctx.ledger.audit_extra = {**(ctx.ledger.audit_extra or {}), "failover": record}
    return upstream


async def _ask(
    ctx: RequestContext,
    rest: list[Any],
    body: dict[str, Any],
    asked: dict[str, Any],
    crossing: Crossing | None,
) -> tuple[Response | None, dict[str, Any]]:
    """``body`` sent over ``rest`` of the route's targets (the failover walk): the answer, or
    None, and the form the answering target got; a target of another protocol gets ``asked``
    (the rest asked for in the open) in its own: a prefill is Messages' alone."""
    client = ctx.state.upstream
    form = body

    def send(target: UpstreamTarget, model: str | None) -> Awaitable[Response]:
        nonlocal form
        crossed = None if crossing is None else crossing.request(target, {**asked, "model": model})
        form = body if crossed is None else asked
        if crossed is not None:
            return client.send(*crossed)
        return client.send(target, orjson.dumps({**body, "model": model}))

    # The same request and ledger, routed over the rest of its targets.
    rerouted = ctx.routed(replace(ctx.routing, targets=rest))
    try:
        return await open_upstream(rerouted, send), form
    except (UpstreamError, ApiError):
        return None, form


class ContinuedStream:
    """A mediated model call's stream read chunk by chunk: when it breaks after text and
    before any tool call, the rest comes from the route's next target, spliced in."""

    __slots__ = (
        "_codec",
        "_crossing",
        "_ctx",
        "_end",
        "_request",
        "_splice",
        "_watch",
        "response",
    )

    def __init__(
        self,
        ctx: RequestContext,
        codec: Codec,
        response: Response,
        request: dict[str, Any],
        crossing: Crossing | None = None,
    ) -> None:
        """``response``: the stream in ``codec``'s protocol (a target's of another, read in
        it); ``crossing``: the request has targets of another protocol."""
        self._ctx = ctx
        self._codec = codec
        self._request = request
        self._crossing = crossing
        self.response = response  # the stream read now: the caller releases it
        self._watch = watch_for(ctx) if codec is ctx.caller.codec else None
        self._end = codec.end_watch()
        self._splice: Splice | None = None

    async def read_chunk(self) -> bytes:
        while True:
            try:
                chunk = await self.response.read_chunk()
            except TransportError as exc:
                failure = translate_error(exc, self._ctx.ledger.provider_name or "")
                if await self._continued(upstream_failure(failure.kind, failure.message).code):
                    continue
                raise
            ended = not chunk and not self._end.seen
            if ended and await self._continued("upstream_protocol_error"):
                continue
            self._end.feed(chunk)
            if self._watch is not None:
                self._watch.feed(self._codec.name, chunk)
            return self._splice.feed(chunk) if self._splice is not None and chunk else chunk

    async def _continued(self, cause: str) -> bool:
        watch, self._watch = self._watch, None  # continued once at most
        if watch is None or self._splice is not None:
            return False
        request = orjson.dumps(self._request)
        more = await reopen(self._ctx, watch, request, cause, self._crossing)
        if more is None:
            return False
        if self._crossing is not None:
            more = self._crossing.caller_stream(more)
        self.response.release(reuse=False)
        self.response, self._end = more, self._codec.end_watch()
        self._splice = Splice(self._codec.name, watch)
        return True


class Splice:
    """A continuation's events rewritten into the client's stream: the first stream's id, its
    open text block continued, later blocks numbered after it; its start is not repeated."""

    __slots__ = (
        "_closed",
        "_offset",
        "_pending",
        "_protocol",
        "_sequence",
        "_skip_start",
        "_strip",
        "_watch",
    )

    def __init__(self, protocol: str, watch: StreamWatch) -> None:
        self._protocol = protocol
        self._watch = watch
        self._pending = b""
        open_block = watch.open_block
        self._offset = open_block if open_block is not None else watch.next_block
        self._skip_start = open_block is not None
        # Messages' prefill was sent without its trailing whitespace, which the client has.
        self._strip = protocol == "messages" and watch.text != watch.text.rstrip()
        self._sequence = watch.sequence
        self._closed: dict[str, Any] | None = None  # Responses: the message ended before a call

    def feed(self, chunk: bytes) -> bytes:
        *events, self._pending = _EVENT_END.split(self._pending + chunk)
        spliced = b"".join(self._event(event) for event in events)
        if len(self._pending) > MAX_EVENT_BYTES:  # passed on as it came, as any relay would
            spliced, self._pending = spliced + self._pending, b""
        return spliced

    def _event(self, event: bytes) -> bytes:
        data = _data_of(event)
        if data is None or data == b"[DONE]":
            return event + b"\n\n"
        try:
            payload = orjson.loads(data)
            if not isinstance(payload, dict):
                return event + b"\n\n"
            if self._protocol == "chat":
                return self._chat(payload)
            if not isinstance(payload.get("type"), str):
                return event + b"\n\n"
            if self._protocol == "responses":
                return self._responses(payload)
            return self._messages(payload)
        except _NOT_OF_THE_PROTOCOL:
            return event + b"\n\n"  # passed on as it came: the client's SDK judges it

    def _chat(self, payload: dict[str, Any]) -> bytes:
        choices = payload.get("choices") or []
        delta = (choices[0].get("delta") or {}) if choices else {}
        opening = choices and not choices[0].get("finish_reason") and not delta.get("content")
        if opening and set(delta) <= {"role", "content"}:
            return b""  # the continuation's opening (role) chunk: the client has one
        if "id" in payload:
            payload["id"] = self._watch.stream_id
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    def _messages(self, payload: dict[str, Any]) -> bytes:
        kind = payload.get("type")
        if kind == "message_start":
            return b""
        closed = b""
        if isinstance(payload.get("index"), int):
            if kind == "content_block_start" and payload["index"] == 0 and self._skip_start:
                self._skip_start = False
                if (payload.get("content_block") or {}).get("type") == "text":
                    return b""  # the client's open text block goes on
                # The rest begins with a tool call: the open text block ends before it.
                closed = _messages_event("content_block_stop", {"index": self._offset})
                self._offset += 1
            payload["index"] += self._offset
        delta = payload.get("delta")
        text = delta.get("text") if isinstance(delta, dict) else None
        if self._strip and isinstance(text, str):
            delta["text"] = text.lstrip()  # type: ignore[index]
            self._strip = not delta["text"]  # type: ignore[index]
        return closed + _messages_event(kind, payload)

    def _responses(self, payload: dict[str, Any]) -> bytes:
        """The continuation's message is the one the client has open: its opening events are
        dropped, its deltas carry the first stream's item and numbers, and what tells the
        whole text (``.done`` events, the final response) tells the text before it too."""
        kind: str = payload["type"]
        watch = self._watch
        if kind in _RESPONSES_OPENING:
            return b""
        closed = b""
        if kind == "response.output_item.added" and self._skip_start:
            self._skip_start = False
            if _is_message(payload.get("item")):
                return b""  # the client's open message goes on
            # The rest begins with another item (a tool call): the open message ends first.
            closed, self._closed = self._message_done(), _message(watch.item_id, watch.text)
            self._offset += 1
        elif kind == "response.output_item.added" and _is_message(payload.get("item")):
            return b""
        if isinstance(payload.get("output_index"), int):
            payload["output_index"] += self._offset
        answer = payload.get("response")
        if self._closed is not None:  # the continuation's items follow the client's message
            if isinstance(answer, dict) and isinstance(answer.get("output"), list):
                answer["output"].insert(0, self._closed)
            return closed + self._numbered(kind, payload)
        if "item_id" in payload:
            payload["item_id"] = watch.item_id
        if kind == "response.output_text.done" and isinstance(payload.get("text"), str):
            payload["text"] = watch.text + payload["text"]
        _prefixed(payload.get("part"), watch.text)
        item = payload.get("item")
        if _is_message(item):
            item["id"] = watch.item_id
            _prefixed_message(item, watch.text)
        if isinstance(answer, dict):
            # Its id stays the continuation's: that is the response the provider stored, whose
            # conversation holds the whole answer (a later previous_response_id continues it).
            for output in answer.get("output") or ():
                if _is_message(output):
                    output["id"] = watch.item_id
                    _prefixed_message(output, watch.text)
                    break
        return closed + self._numbered(kind, payload)

    def _numbered(self, kind: str, payload: dict[str, Any]) -> bytes:
        if self._sequence is not None:
            self._sequence += 1
            payload["sequence_number"] = self._sequence
        return _messages_event(kind, payload)

    def _message_done(self) -> bytes:
        """The events that tell the client's open message is done, with its text so far."""
        watch = self._watch
        where = {"item_id": watch.item_id, "output_index": self._offset}
        part = {"type": "output_text", "text": watch.text, "annotations": []}
        events = (
            ("response.output_text.done", {**where, "content_index": 0, "text": watch.text}),
            ("response.content_part.done", {**where, "content_index": 0, "part": part}),
            (
                "response.output_item.done",
                {"output_index": self._offset, "item": _message(watch.item_id, watch.text)},
            ),
        )
        return b"".join(self._numbered(kind, {"type": kind, **event}) for kind, event in events)


def _messages_event(kind: str, payload: dict[str, Any]) -> bytes:
    """An SSE event named ``kind`` (Messages and Responses name each event)."""
    if "type" not in payload:
        payload = {"type": kind, **payload}
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _message(item_id: Any, text: str) -> dict[str, Any]:
    """A Responses message item whose one part is ``text``."""
    part = {"type": "output_text", "text": text, "annotations": []}
    return {
        "id": item_id,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [part],
    }


# A Responses continuation's opening events: the client's stream has them already.
_RESPONSES_OPENING = frozenset(
    ("response.created", "response.in_progress", "response.content_part.added")
)


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "message"


def _prefixed_message(item: dict[str, Any], text: str) -> None:
    """The message's first text part told with ``text`` before it."""
    for part in item.get("content") or ():
        if _prefixed(part, text):
            return


def _prefixed(part: Any, text: str) -> bool:
    told = isinstance(part, dict) and part.get("type") == "output_text"
    if told and isinstance(part.get("text"), str):
        part["text"] = text + part["text"]
    return told


def _continuations(
    protocol: str, raw: bytes | bytearray | None, watch: StreamWatch
) -> list[dict[str, Any]]:
    """The requests for the rest of the answer, in the order they are tried (none when it
    cannot be asked for): Messages' prefill first, then the rest asked for in the open."""
    text = watch.text
    if not text.strip() or raw is None:
        return []
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    field = _CONVERSATION[protocol]
    messages = body.get(field) if isinstance(body, dict) else None
    if isinstance(messages, str) and protocol == "responses":
        messages = [{"role": "user", "content": messages}]  # Responses' input as one string
    if not isinstance(messages, list) or not messages:
        return []
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") == "assistant":
        return []  # the caller's own prefill: what it asked to continue is not ours to join
    # (Messages refuses a final assistant message that ends in whitespace.)
    said = {"role": "assistant", "content": text.rstrip() if protocol == "messages" else text}
    asked = {**body, field: [*messages, said, {"role": "user", "content": CONTINUE}]}
    if protocol == "messages":
        return [{**body, field: [*messages, said]}, asked]
    return [asked]


def _targets_after(ctx: RequestContext) -> list[Any]:
    """The route's targets after the one that answered (a provider may be listed twice)."""
    served = [(name, model) for name, _, model in ctx.routing.targets]
    if (ctx.ledger.provider_name, ctx.ledger.model) not in served:
        return []
    return ctx.routing.targets[served.index((ctx.ledger.provider_name, ctx.ledger.model)) + 1 :]


def _data_of(event: bytes) -> bytes | None:
    lines = [line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")]
    return b"".join(lines) if lines else None


def is_stream(response: Response) -> bool:
    return response.status == 200 and response.content_type == "text/event-stream"
