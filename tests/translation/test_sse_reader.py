"""The incremental SSE reader (``codecs/sse.py`` ``EventReader``) reads any stream, cut into
pieces of any size, exactly as the whole-text parser ``parse_events`` reads it: LF, CR and
CRLF line ends (mixed, and cut between CR and LF), comments, other fields, several data lines,
an event name, blank lines before any event, characters cut between pieces, no end marker."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawpod.sidecar.codecs.sse import EventReader, parse_events

LINES = st.sampled_from(
    [
        "data: {}",
        'data: {"text":"é ☃ 𝄞"}',
        "data:no space",
        "data: ",
        "data",
        "event: content_block_delta",
        "event:",
        ": a comment",
        "id: 7",
        "retry: 10",
        "data: [DONE]",
        "",
    ]
)
ENDS = st.sampled_from(["\n", "\r\n", "\r"])


def read_in_pieces(stream: bytes, cuts: list[int]) -> list[tuple[str | None, str]]:
    reader = EventReader()
    events, start = [], 0
    for cut in sorted({c % (len(stream) + 1) for c in cuts}):
        events += reader.feed(stream[start:cut])
        start = cut
    events += reader.feed(stream[start:])
    return events + reader.finish()


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(LINES, ENDS), max_size=30),
    st.booleans(),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_pieces_read_as_the_whole(lines: list[tuple[str, str]], lf_only: bool, cuts: list[int]):
    stream = "".join(line + ("\n" if lf_only else end) for line, end in lines).encode()
    assert read_in_pieces(stream, cuts) == list(parse_events(stream))


def test_every_piece_size_of_an_lf_stream():
    events = [
        b"data: one\n\n",
        b"event: named\ndata: two\n\n",
        b": keep-alive\n\n",
        b"data: three\ndata: lines\n\n",
        b"\n\nevent: a\nid: 1\ndata: four\n\n",
        'data: "é ☃ 𝄞"\n\n'.encode(),
        b"data: unended",
    ]
    stream = b"".join(events)
    expected = list(parse_events(stream))
    assert expected[-1] == (None, "unended")
    for size in range(1, len(stream) + 1):
        assert read_in_pieces(stream, list(range(size, len(stream), size))) == expected


def test_bad_utf8_is_a_value_error():
    with pytest.raises(ValueError):
        EventReader().feed(b"data: \xff\n\n")
