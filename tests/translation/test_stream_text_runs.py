"""Text events read as runs (``StreamReader.read_text_run`` into ``StreamWriter.write_texts``:
the text events a piece of a stream starts with, found by bytes searches and written from
bytes, none parsed on its own) translate exactly as when every event is parsed whole, however
the stream is cut into pieces and whatever it holds inside and between them: escapes,
characters outside ASCII, raw control characters and bad UTF-8 (the stream fails as when read
whole), named events, CR line ends, OpenAI's ``obfuscation`` of any value."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawpod.sidecar.translation import stream_readers, streams
from clawpod.sidecar.translation.streams import stream_translator
from tests.support.codecs import codec_of
from tests.support.upstream import Reply
from tests.translation.conftest import DIRECTIONS, MODEL, TranslatingPod
from tests.translation.streams import EVENTS, stream_through
from tests.translation.test_stream_text_template import (
    API_OF,
    CHAT_PIECES,
    MESSAGES_END,
    MESSAGES_PIECES,
    MESSAGES_START,
    REASONING_ID,
    chat_chunk,
    text_delta,
    translate,
)

CHAT_START = chat_chunk({"role": "assistant", "content": ""}, obfuscation="z")
DONE = b"data: [DONE]\n\n"
WORDS = ["The", " quarterly", " figures", " show", " growth", ",", " and", " more"]


def in_pieces(stream: bytes, cuts: list[int], target: str, caller: str) -> bytes:
    """``stream`` fed cut at ``cuts`` (offsets), with templates and runs."""
    translator = stream_translator(
        target, codec_of(API_OF[caller]), provider="p", model="m", include_usage=True
    )
    bounds = [0, *sorted({c % (len(stream) + 1) for c in cuts}), len(stream)]
    out = b"".join(translator.feed(stream[a:b]) for a, b in itertools.pairwise(bounds))
    return REASONING_ID.sub(b'"rs_"', out + translator.finish())


def assert_read_alike(events: list[bytes], target: str, caller: str) -> None:
    expected = translate(events, target, caller, templates=False)  # every event parsed whole
    stream = b"".join(events)
    for size in (1, 7, 301, 4096, len(stream) or 1):
        cuts = list(range(size, len(stream), size))
        assert in_pieces(stream, cuts, target, caller) == expected, size


def plain_chunks(n: int, **fields: str) -> list[bytes]:
    return [chat_chunk({"content": WORDS[i % len(WORDS)]}, **fields) for i in range(n)]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(CHAT_PIECES, max_size=40),
    st.lists(st.integers(0, 1 << 16), max_size=8),
    st.sampled_from(["messages", "responses"]),
)
def test_chat_streams_in_any_pieces_read_alike(pieces: list[bytes], cuts: list[int], caller: str):
    events = [CHAT_START, *plain_chunks(3, obfuscation="ab"), *pieces, DONE]
    expected = translate(events, "chat", caller, templates=False)
    assert in_pieces(b"".join(events), cuts, "chat", caller) == expected


@settings(max_examples=150, deadline=None)
@given(
    st.lists(MESSAGES_PIECES, max_size=40),
    st.lists(st.integers(0, 1 << 16), max_size=8),
    st.sampled_from(["chat", "responses"]),
)
def test_messages_streams_in_any_pieces_read_alike(
    pieces: list[bytes], cuts: list[int], caller: str
):
    events = [MESSAGES_START, *[text_delta(w, 0) for w in WORDS], *pieces, MESSAGES_END]
    expected = translate(events, "messages", caller, templates=False)
    assert in_pieces(b"".join(events), cuts, "messages", caller) == expected


@pytest.mark.parametrize(
    "odd",
    [
        b'"a \\"quoted\\" word"',  # an escaped quote ends the run: read whole
        b'"caf\\u00e9 \\/ \\n"',  # escapes: written as orjson writes them
        '"é ☃ 𝄞 \u2028"'.encode(),  # beyond ASCII, as it is
        b'"raw\x01control"',  # not JSON: the stream fails
        b'"raw\nline"',
        b'"bad \xff utf-8"',
        b'"bad \xc3"',
    ],
)
@pytest.mark.parametrize("caller", ["messages", "responses"])
def test_odd_texts_inside_a_run_read_alike(odd: bytes, caller: str):
    chunks = plain_chunks(12)
    chunks[6] = chat_chunk({"content": "SLOT"}).replace(b'"SLOT"', odd)
    assert_read_alike([CHAT_START, *chunks, DONE], "chat", caller)


@pytest.mark.parametrize(
    "obfuscation",
    [b"xY3k", b"", b'q"uote', b"back\\\\slash", b"\xe2\x80\xa8", b"\x01", b"\xc3\xa9", b"\xff"],
)
def test_any_obfuscation_inside_a_run_reads_alike(obfuscation: bytes):
    chunks = plain_chunks(12, obfuscation="OBF")
    chunks[5] = chunks[5].replace(b'"OBF"', b'"' + obfuscation + b'"')
    assert_read_alike([CHAT_START, *chunks, DONE], "chat", "messages")


@pytest.mark.parametrize("name", [b"content_block_delta", b"", b"other", b"caf\xc3\xa9", b"\xff"])
def test_messages_runs_of_any_event_name_read_alike(name: bytes):
    deltas = [text_delta(w, 0) for w in WORDS * 2]
    deltas[9] = deltas[9].replace(b"event: content_block_delta", b"event: " + name)
    assert_read_alike([MESSAGES_START, *deltas, MESSAGES_END], "messages", "chat")


@pytest.mark.parametrize("target", ["chat", "messages"])
def test_a_stream_cut_anywhere_reads_alike(target: str):
    """Every place a piece can end: inside a text, its tail, a free field's value, its end
    or its blank line, just after a run, in the next event's head (pieces large enough to be
    read in runs: ``streams._RUNS_FROM``)."""
    if target == "chat":
        events = [CHAT_START, *plain_chunks(24, obfuscation="xY3k"), DONE]
    else:
        texts = [text_delta(w, 0) for w in WORDS * 5]
        events = [MESSAGES_START, *texts, MESSAGES_END]
    caller = "messages" if target == "chat" else "chat"
    expected = translate(events, target, caller, templates=False)
    stream = b"".join(events)
    assert len(stream) > 2 * streams._RUNS_FROM
    for cut in range(1, len(stream)):
        assert in_pieces(stream, [cut], target, caller) == expected, cut
    for size in range(streams._RUNS_FROM, streams._RUNS_FROM + 300, 3):
        cuts = list(range(size, len(stream), size))
        assert in_pieces(stream, cuts, target, caller) == expected, size


def test_cr_line_ends_read_alike():
    events = [CHAT_START, *plain_chunks(12), DONE]
    events[7] = events[7].replace(b"\n\n", b"\r\n\r\n")
    assert_read_alike(events, "chat", "messages")
    crlf = [e.replace(b"\n", b"\r\n") for e in events]
    assert_read_alike(crlf, "chat", "messages")


def test_empty_texts_and_calls_between_runs_read_alike():
    call = chat_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]})
    args = chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1}'}}]})
    chunks = plain_chunks(20)
    chunks[4] = chat_chunk({"content": ""})
    chunks[9:9] = [call, args]
    for caller in ("messages", "responses"):
        assert_read_alike([CHAT_START, *chunks, DONE], "chat", caller)


@pytest.mark.parametrize("caller", ["messages", "responses"])
def test_a_stream_of_text_is_read_in_runs(monkeypatch: pytest.MonkeyPatch, caller: str):
    """Runs are used, not only harmless: after its first events, a stream of text chunks fed
    in large pieces reads no event on its own, for every caller's writer (Responses numbers
    each event: a run's events are numbered in turn)."""
    reads = []
    read = stream_readers._TextTemplate.read
    monkeypatch.setattr(
        stream_readers._TextTemplate, "read", lambda self, p: reads.append(p) or read(self, p)
    )
    events = [CHAT_START, *plain_chunks(200, obfuscation="xY3k"), DONE]
    stream = b"".join(events)
    out = in_pieces(stream, list(range(16384, len(stream), 16384)), "chat", caller)
    assert out == translate(events, "chat", caller, templates=False)
    assert len(reads) < 20  # of 200: the first events, and those a piece cuts in two


def test_a_tail_that_overlaps_itself_reads_no_runs():
    """With a free field ``read`` takes the first tail after the text: a tail that could
    start inside the text and end inside itself might be found earlier there."""
    template = stream_readers._TextTemplate(free="o")
    template._learn_runs('{"c":', '"x"x"o":"', free=True)
    assert not template.reads_runs
    template._learn_runs('{"c":', '},"o":"', free=True)
    assert template.reads_runs
    template._learn_runs('{"c":', "}}", free=False)  # read slices: the tail's place is fixed
    assert template.reads_runs


def test_runs_end_with_the_stream():
    """A run cut by the end of the stream, and nothing after the end, as read whole."""
    events = [CHAT_START, *plain_chunks(30), DONE]
    stream = b"".join(events)
    cut = stream[: len(stream) - 100]
    expected = translate([cut], "chat", "messages", templates=False)
    assert in_pieces(cut, [], "chat", "messages") == expected
    after = [*events, *plain_chunks(5)]
    assert_read_alike(after, "chat", "messages")


@pytest.mark.parametrize(("caller", "target"), DIRECTIONS)
async def test_a_stream_read_in_runs_is_charged_as_read_event_by_event(
    translating_pod: TranslatingPod, caller: str, target: str
):
    """The provider's usage is read from what the translator reads event by event (its text
    runs hold nothing else): a long answer sent in one piece, read in runs, is charged and
    reaches the caller exactly as the same answer sent one event per write."""
    pod = translating_pod
    texts = [f"{WORDS[i % len(WORDS)]}{i}" for i in range(120)]
    events = EVENTS[target](texts, [], 40)
    pod.script(target, Reply.sse(events), Reply.sse([b"".join(events)]))
    event_by_event = await stream_through(pod, caller, "plain", MODEL[target])
    in_one_piece = await stream_through(pod, caller, "plain", MODEL[target])
    for got in (event_by_event, in_one_piece):
        assert got.error is None, got.error
        assert got.text == "".join(texts)
    assert in_one_piece.deltas == event_by_event.deltas
    first, second = pod.audit("plain")
    assert first["usage"] == second["usage"]
    assert (second["usage"]["input_tokens"], second["usage"]["output_tokens"]) == (40, 3)
