"""A Messages text delta, the event most of a stream is made of, is written from bytes around
its JSON-encoded text (``codecs/messages/stream.py`` ``TEXT_DELTA_HEAD``/``TEXT_DELTA_TAIL``),
by the mediated client stream and by the translation's writer alike: the same bytes the
general path, ``event_frame`` over the whole event, writes, for any text and any block."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from clawpod.sidecar.codecs.messages.stream import TEXT_DELTA_HEAD, TEXT_DELTA_TAIL
from clawpod.sidecar.codecs.sse import event_frame


@given(st.text(), st.integers(min_value=0, max_value=10_000))
def test_a_text_delta_is_the_bytes_event_frame_writes(text: str, index: int) -> None:
    delta = {"type": "text_delta", "text": text}
    whole = event_frame(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )
    assert TEXT_DELTA_HEAD % index + orjson.dumps(text) + TEXT_DELTA_TAIL == whole
