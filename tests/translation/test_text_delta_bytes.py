"""A text delta, the event most of a stream is made of, is written from bytes around its
JSON-encoded text: a Messages one (``codecs/messages/stream.py`` ``TEXT_DELTA_HEAD``) by the
mediated client stream and by the translation's writer alike, a Chat Completions one by the
mediated client stream (``codecs/chat/stream.py`` ``ChatClientStream``). Each is the same
bytes as the general path, the SSE frame of the whole event, for any text, block, id and
model."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from clawpod.sidecar.codecs.chat.stream import ChatClientStream
from clawpod.sidecar.codecs.messages.stream import TEXT_DELTA_HEAD, TEXT_DELTA_TAIL
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
