"""A text delta, the event most of a stream is made of, is written from bytes around its
JSON-encoded text: a Messages one (``codecs/messages/stream.py`` ``TEXT_DELTA_HEAD``) by the
mediated client stream and by the translation's writer alike, a Chat Completions one by the
mediated client stream (``codecs/chat/stream.py`` ``ChatClientStream``), a Responses one
(``codecs/responses/stream.py`` ``text_delta_head``) by the mediated client stream and by the
translation's writer alike. Each is the same bytes as the general path, the SSE frame of the
whole event, for any text, block, id, model and sequence number."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from clawpod.sidecar.codecs.chat.stream import ChatClientStream
from clawpod.sidecar.codecs.messages.stream import TEXT_DELTA_HEAD, TEXT_DELTA_TAIL
from clawpod.sidecar.codecs.responses import stream as responses_stream
from clawpod.sidecar.codecs.responses.codec import _Lifecycle
from clawpod.sidecar.codecs.sse import data_frame, event_frame
from clawpod.sidecar.codecs.streaming import TextDelta


@given(st.text(), st.integers(min_value=0, max_value=10_000))
def test_a_text_delta_is_the_bytes_event_frame_writes(text: str, index: int) -> None:
    delta = {"type": "text_delta", "text": text}
    whole = event_frame(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )
    assert TEXT_DELTA_HEAD % index + orjson.dumps(text) + TEXT_DELTA_TAIL == whole


@given(st.lists(st.text(), min_size=1, max_size=4), st.text(), st.text(), st.integers(0, 2**40))
def test_a_chat_text_chunk_is_the_bytes_data_frame_writes(
    texts: list[str], answer_id: str, model: str, created: int
) -> None:
    stream = ChatClientStream(render=lambda answer: [], error=lambda err: b"")
    head = {"id": answer_id, "created": created, "model": model}
    deltas = [TextDelta((0,), text) for text in texts]

    def chunk(delta: dict[str, str]) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        return data_frame({**head, "object": "chat.completion.chunk", "choices": [choice]})

    whole = chunk({"role": "assistant", "content": ""}) + b"".join(
        chunk({"content": text}) for text in texts
    )
    assert stream.text(head, deltas) == whole


@given(st.text(), st.none() | st.text(), st.integers(0, 10_000), st.integers(0, 10_000))
def test_a_responses_text_delta_is_the_bytes_the_lifecycle_writes(
    text: str, item_id: str | None, indexes: int, sequence: int
) -> None:
    where = {"item_id": item_id, "output_index": indexes}
    lifecycle = _Lifecycle()
    lifecycle.sequence = sequence
    fields = {**where, "content_index": indexes % 7, "delta": text, "logprobs": []}
    whole = lifecycle.event("response.output_text.delta", fields)
    head = responses_stream.text_delta_head(where, indexes % 7)
    assert head + orjson.dumps(text) + responses_stream.TEXT_DELTA_TAIL % sequence == whole


@given(st.lists(st.tuples(st.integers(0, 2), st.text(min_size=1)), min_size=1, max_size=6))
def test_a_responses_client_streams_text_is_the_lifecycles_events(
    pieces: list[tuple[int, str]],
) -> None:
    """The mediated client stream's text, parts of several items, numbered as the general
    path numbers every event."""
    stream = responses_stream.ResponsesClientStream(
        _Lifecycle(), lambda body: [], lambda head: head, lambda err: b"", live=True
    )
    head = {"id": "resp_1", "model": "m"}
    deltas = [TextDelta((item, 0), text, f"msg_{item}") for item, text in pieces]
    written = stream.text(head, deltas)

    general = _Lifecycle()
    started = {**head, "status": "in_progress", "output": [], "usage": None}
    frames = [general.event(kind, {"response": started}) for kind in _OPENING]
    shown: dict[int, int] = {}
    for item, text in pieces:
        if item not in shown:
            shown[item] = len(shown)
            added = {"id": f"msg_{item}", "type": "message", "status": "in_progress"}
            added.update(content=[], role="assistant")
            at = {"output_index": shown[item], "item": added}
            frames.append(general.event("response.output_item.added", at))
            where = {"item_id": f"msg_{item}", "output_index": shown[item]}
            empty = {"type": "output_text", "text": "", "annotations": []}
            at = {**where, "content_index": 0, "part": empty}
            frames.append(general.event("response.content_part.added", at))
        where = {"item_id": f"msg_{item}", "output_index": shown[item]}
        change = {**where, "content_index": 0, "delta": text, "logprobs": []}
        frames.append(general.event("response.output_text.delta", change))
    assert written == b"".join(frames)


_OPENING = ("response.created", "response.in_progress")
