"""Text events read as runs (``StreamReader.read_text_run`` into ``StreamWriter.write_texts``:
the text events a piece of a stream starts with, found by bytes searches and written from
bytes, none parsed on its own) translate exactly as when every event is parsed whole, however
the stream is cut into pieces and whatever it holds inside and between them: escapes,
characters outside ASCII, raw control characters and bad UTF-8 (the stream fails as when read
whole), named events, CR line ends, OpenAI's ``obfuscation`` of any value."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import upstream
from bench.run import RESPONSES_MODEL
from bench.streams import EVENTS as BENCH_EVENTS
from clawpod.sidecar.codecs.sse import parse_events
from clawpod.sidecar.translation import stream_readers
from clawpod.sidecar.translation.streams import stream_translator
from tests.support.codecs import codec_of
from tests.support.upstream import Reply
from tests.translation.conftest import DIRECTIONS, MODEL, TranslatingPod
from tests.translation.streams import EVENTS, stream_through
from tests.translation.test_stream_text_template import (
    API_OF,
    CHAT_PIECES,
    DROP,
    MESSAGES_END,
    MESSAGES_PIECES,
    MESSAGES_START,
    REASONING_ID,
    RESPONSES_END,
    RESPONSES_ORDERS,
    RESPONSES_PIECES,
    RESPONSES_START,
    chat_chunk,
    responses_delta,
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


# Each Responses caller's test reads another order of the provider's fields.
RESPONSES_ORDER = {"chat": "openai", "messages": "sorted"}
RESPONSES_CALLERS = [("responses", caller) for caller in RESPONSES_ORDER]


def plain_deltas(n: int, order: str = "openai", first: int = 4) -> list[bytes]:
    return [responses_delta(WORDS[i % len(WORDS)], first + i, order) for i in range(n)]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(RESPONSES_PIECES, max_size=40),
    st.lists(st.integers(0, 1 << 16), max_size=8),
    st.sampled_from(list(RESPONSES_ORDERS)),
    st.sampled_from(["chat", "messages"]),
)
def test_responses_streams_in_any_pieces_read_alike(
    pieces: list[bytes], cuts: list[int], order: str, caller: str
):
    events = [*RESPONSES_START, *plain_deltas(12, order), *pieces, *RESPONSES_END]
    expected = translate(events, "responses", caller, templates=False)
    assert in_pieces(b"".join(events), cuts, "responses", caller) == expected


def _delta(text: str = "x", **changes: Any) -> Callable[[str], bytes]:
    return lambda order: responses_delta(text, 10, order, **changes)


def _changed(old: bytes, new: bytes, text: str = "x") -> Callable[[str], bytes]:
    return lambda order: responses_delta(text, 10, order).replace(old, new)


ODD_DELTAS = {
    # Another item, output or part, or a field more or less: not the template's event.
    "item": _delta(item_id="msg_2"),
    "output": _delta(output_index=1),
    "part": _delta(content_index=1),
    "more": _delta(annotations=[]),
    "logprobs": _delta(logprobs=[{"token": "x", "logprob": -0.5}]),
    "no-obfuscation": _delta(obfuscation=DROP),
    "no-number": _delta(sequence_number=DROP),
    # A number that is not an integer as JSON writes it, or not the next one.
    "fraction": _delta(sequence_number=1.5),
    "negative": _delta(sequence_number=-1),
    "string": _delta(sequence_number="10"),
    "null": _delta(sequence_number=None),
    "bool": _delta(sequence_number=True),
    "leading-zero": _changed(b'"sequence_number":10', b'"sequence_number":010'),
    "exponent": _changed(b'"sequence_number":10', b'"sequence_number":1e1'),
    "jump": lambda order: responses_delta("x", 99, order),
    "huge": _changed(b'"sequence_number":10', b'"sequence_number":' + b"9" * 30),
    # Escapes, characters beyond ASCII, raw control characters, bad UTF-8.
    "quotes": _delta('a "quoted" word'),
    "escapes": _changed(b"SLOT", b"caf\\u00e9 \\/ \\n", "SLOT"),
    "unicode": _delta("é ☃ 𝄞 \u2028"),
    "control": _changed(b"SLOT", b"raw\x01control", "SLOT"),
    "bad-utf-8": _changed(b"SLOT", b"bad \xff utf-8", "SLOT"),
    "cut-utf-8": _changed(b"SLOT", b"bad \xc3", "SLOT"),
    "obfuscation-quote": _delta(obfuscation='q"uote'),
    "obfuscation-unicode": _delta(obfuscation="\u2028"),
    "obfuscation-control": _changed(b"xY3k", b"x\x01k"),
    "obfuscation-utf-8": _changed(b"xY3k", b"\xc3"),
    # The template's own bytes inside the text.
    "tail-in-text": _delta('","logprobs":[],"obfuscation":"'),
    "head-in-text": _delta('"sequence_number":5,"item_id":"msg_1"'),
    "event-end-in-text": _delta("}\n\ndata: "),
    # A refusal, another event name, an event cut short (not JSON: the stream fails).
    "refusal": _delta(type="response.refusal.delta"),
    "name": _changed(b"event: response.output_text.delta", b"event: other"),
    "cut-short": lambda order: responses_delta("x", 10, order)[:70] + b"\n\n",
    "cut-end": lambda order: responses_delta("x", 10, order)[:-3] + b"\n\n",
}


@pytest.mark.parametrize("odd", list(ODD_DELTAS))
@pytest.mark.parametrize("order", ["openai", "bench"])
@pytest.mark.parametrize("caller", ["chat", "messages"])
def test_odd_responses_deltas_inside_a_run_read_alike(odd: str, order: str, caller: str):
    """Whatever one event of a run of Responses deltas holds, the stream translates as when
    every event is parsed whole: the run ends before an event that is not the template's, and
    one whose values the run cannot take is read whole, as is the rest of its piece."""
    deltas = plain_deltas(16, order)
    deltas[6] = ODD_DELTAS[odd](order)
    assert_read_alike([*RESPONSES_START, *deltas, *RESPONSES_END], "responses", caller)


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


@pytest.mark.parametrize("target", ["chat", "messages", "responses"])
def test_a_stream_cut_anywhere_reads_alike(target: str):
    """Every place a piece can end: inside a text, its tail, a free field's value, its end
    or its blank line, just after a run, in the next event's head (held: ``_hold``), in
    pieces of any size."""
    if target == "chat":
        events = [CHAT_START, *plain_chunks(24, obfuscation="xY3k"), DONE]
    elif target == "responses":
        events = [*RESPONSES_START, *plain_deltas(20), *RESPONSES_END]
    else:
        texts = [text_delta(w, 0) for w in WORDS * 5]
        events = [MESSAGES_START, *texts, MESSAGES_END]
    caller = "messages" if target == "chat" else "chat"
    expected = translate(events, target, caller, templates=False)
    stream = b"".join(events)
    for cut in range(1, len(stream)):
        assert in_pieces(stream, [cut], target, caller) == expected, cut
    for size in range(20, 620, 6):
        cuts = list(range(size, len(stream), size))
        assert in_pieces(stream, cuts, target, caller) == expected, size


def test_cr_line_ends_read_alike():
    events = [CHAT_START, *plain_chunks(12), DONE]
    events[7] = events[7].replace(b"\n\n", b"\r\n\r\n")
    assert_read_alike(events, "chat", "messages")
    crlf = [e.replace(b"\n", b"\r\n") for e in events]
    assert_read_alike(crlf, "chat", "messages")


@pytest.mark.parametrize("order", ["openai", "plain", "bench"])
@pytest.mark.parametrize("caller", ["chat", "messages"])
def test_an_event_whose_start_is_not_its_templates_reads_alike(order: str, caller: str):
    """The first event after a template is learnt, its ``data: {...`` up to the first value
    replaced by a NUL: no data field, so no event. A run must not take it for a text event
    (a run's prefix is the template's from the start, never a placeholder)."""
    deltas = plain_deltas(16, order)
    first = b'"item_id":"' if order == "bench" else b'"sequence_number":'  # then its value
    deltas[1] = b"\0" + deltas[1][deltas[1].index(first) + len(first) :]
    assert_read_alike([*RESPONSES_START, *deltas, *RESPONSES_END], "responses", caller)


def test_bad_utf8_fails_a_stream_alike_however_it_is_cut():
    """The failure names the bad byte, not its place in whatever was decoded, which moved with
    the pieces and with the events read as runs (a CR after it in the same piece has the reader
    decode the piece line by line)."""
    chunks = plain_chunks(12, obfuscation="xY3k")
    chunks[5] = chunks[5].replace(b'"xY3k"', b'"xY3k\xff')
    chunks[6] = chunks[6].replace(b'"xY3k"', b'"xY3k\r')
    assert_read_alike([b"".join([CHAT_START, *chunks, DONE])], "chat", "messages")


def test_empty_texts_and_calls_between_runs_read_alike():
    call = chat_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]})
    args = chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1}'}}]})
    chunks = plain_chunks(20)
    chunks[4] = chat_chunk({"content": ""})
    chunks[9:9] = [call, args]
    for caller in ("messages", "responses"):
        assert_read_alike([CHAT_START, *chunks, DONE], "chat", caller)


@pytest.mark.parametrize(
    ("target", "caller"), [("chat", "messages"), ("chat", "responses"), *RESPONSES_CALLERS]
)
def test_a_stream_of_text_is_read_in_runs(
    monkeypatch: pytest.MonkeyPatch, target: str, caller: str
):
    """Runs are used, not only harmless: after its first events, a stream of text events fed
    in large pieces parses no event on its own, for every caller's writer (Responses numbers
    each event: a run's events are numbered in turn) and from a Responses provider, whose
    deltas are numbered too, wherever the number stands."""
    if target == "chat":
        events = [CHAT_START, *plain_chunks(200, obfuscation="xY3k"), DONE]
    else:
        events = [*RESPONSES_START, *plain_deltas(200, RESPONSES_ORDER[caller]), *RESPONSES_END]
    assert_read_in_runs(monkeypatch, events, target, caller)


def assert_read_in_runs(
    monkeypatch: pytest.MonkeyPatch, events: list[bytes], target: str, caller: str
) -> None:
    """Fed in 16 KiB pieces, the stream reads alike and parses fewer than 20 events whole
    (of 200: the first events, the last, those a piece cuts in two)."""
    expected = translate(events, target, caller, templates=False)
    parsed = []
    parse = stream_readers._object
    monkeypatch.setattr(stream_readers, "_object", lambda p: parsed.append(p) or parse(p))
    stream = b"".join(events)
    assert in_pieces(stream, list(range(16384, len(stream), 16384)), target, caller) == expected
    assert len(parsed) < 20


LLAMA_CPP_PYTHON = Path(__file__).parents[1] / "fixtures/local_servers"


@pytest.mark.parametrize("caller", ["messages", "responses"])
def test_a_real_llama_cpp_python_stream_is_read_in_runs(
    monkeypatch: pytest.MonkeyPatch, caller: str
):
    """A stream recorded from llama-cpp-python, whose JSON has a space after each colon and
    comma (``json.dumps``'s default), teaches a template as a compact one does: its text
    events are read in runs, not each parsed whole, and read alike however it is cut."""
    recorded = (LLAMA_CPP_PYTHON / "llama_cpp_python.chat_text.recorded.sse").read_bytes()
    assert_read_in_runs(monkeypatch, [recorded], "chat", caller)
    assert_read_alike([recorded], "chat", caller)


@pytest.mark.parametrize("order", ["bench", "sorted"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sequence_number", 1.5),
        ("sequence_number", -1),
        ("sequence_number", "7"),
        ("sequence_number", 2**64 - 1),
        ("obfuscation", 'a"b'),
        ("obfuscation", "a\\b"),
        ("obfuscation", "\u00e9t\u00e9"),
        ("obfuscation", 7),
    ],
)
def test_a_responses_delta_whose_free_and_numbered_fields_are_read_as_one_reads_alike(
    order: str, field: str, value: Any
):
    """Where a delta's ``obfuscation`` and ``sequence_number`` are next to each other among
    its values (the bench's order; sorted keys), a run reads them as one value checked by one
    pattern: a delta whose either field is not what that pattern takes ends the run and is read
    whole, in any pieces."""
    deltas = plain_deltas(20, order)
    deltas[11] = responses_delta(WORDS[3], 15, order, **{field: value})
    assert_read_alike([*RESPONSES_START, *deltas, *RESPONSES_END], "responses", "chat")


@pytest.mark.parametrize("order", ["bench", "sorted"])
@pytest.mark.parametrize(
    ("written", "instead"),
    [
        (b'"sequence_number":15', b'"sequence_number":015'),
        (b'"sequence_number":15', b'"sequence_number":15x'),
        (b'"sequence_number":15', b'"sequence_number":'),
        (b'"obfuscation":"xY3k"', b'"obfuscation":"x\tY"'),
        (b'"obfuscation":"xY3k"', b'"obfuscation":"x\xffY"'),
    ],
)
def test_a_responses_delta_not_json_where_its_fields_are_read_as_one_fails_alike(
    order: str, written: bytes, instead: bytes
):
    """The pattern that checks the two fields read as one takes what JSON takes there and no
    more: a number written otherwise, a raw control character or bad UTF-8 in the string
    fails the stream as reading every event whole does."""
    deltas = plain_deltas(20, order)
    deltas[11] = responses_delta(WORDS[3], 15, order).replace(written, instead)
    assert deltas[11] != responses_delta(WORDS[3], 15, order)
    assert_read_alike([*RESPONSES_START, *deltas, *RESPONSES_END], "responses", "chat")


@pytest.mark.parametrize(("target", "caller"), [("chat", "messages"), *RESPONSES_CALLERS])
@pytest.mark.parametrize("size", [150, 700, 1500])
def test_a_stream_in_small_pieces_is_read_in_runs(
    monkeypatch: pytest.MonkeyPatch, target: str, caller: str, size: int
):
    """Pieces of one to a few events, nearly all cut inside one (what a provider's writes
    become when read as they arrive), are read in runs too: the start of an event a run
    leaves is held for the next piece, not read on its own; fewer than 20 events of 200 are
    read one at a time, and the stream reads alike."""
    if target == "chat":
        events = [CHAT_START, *plain_chunks(200, obfuscation="xY3k"), DONE]
    else:
        events = [*RESPONSES_START, *plain_deltas(200, RESPONSES_ORDER[caller]), *RESPONSES_END]
    expected = translate(events, target, caller, templates=False)
    one_at_a_time = []
    read = stream_readers.StreamReader._read

    def counted(reader: stream_readers.StreamReader, found: list) -> list:
        one_at_a_time.extend(found)
        return read(reader, found)

    monkeypatch.setattr(stream_readers.StreamReader, "_read", counted)
    stream = b"".join(events)
    assert in_pieces(stream, list(range(size, len(stream), size)), target, caller) == expected
    assert len(one_at_a_time) < 20


def test_the_bench_responses_stream_is_read_in_runs(monkeypatch: pytest.MonkeyPatch):
    """The stream bench.ab measures the Responses provider with (its number last) is read in
    runs as the providers' own orders are."""
    events = list(upstream.responses_stream(RESPONSES_MODEL))
    assert_read_in_runs(monkeypatch, events, "responses", "messages")


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


@pytest.mark.parametrize("provider_id", ["chatcmpl-%d%s%%b%", "chatcmpl-%(x)s"])
def test_a_provider_id_holding_format_characters_reaches_a_responses_caller_as_it_is(
    provider_id: str,
):
    """The Responses writer writes a run's deltas with one format of the message's delta,
    whose item id holds the provider's answer id: a ``%`` in that id is its own."""
    chunks = [c.replace(b'"chatcmpl-1"', orjson.dumps(provider_id)) for c in plain_chunks(40)]
    start = CHAT_START.replace(b'"chatcmpl-1"', orjson.dumps(provider_id))
    stream = b"".join([start, *chunks, DONE])
    for cuts in ([], list(range(1, len(stream)))):
        out = in_pieces(stream, cuts, "chat", "responses")
        deltas = [
            orjson.loads(payload)
            for name, payload in parse_events(out)
            if name == "response.output_text.delta"
        ]
        assert {d["item_id"] for d in deltas} == {f"msg_0_{provider_id}"}
        assert "".join(d["delta"] for d in deltas) == "".join(WORDS * 5)
        numbers = [d["sequence_number"] for d in deltas]
        assert numbers == list(range(numbers[0], numbers[0] + 40))


async def test_a_stream_without_usage_is_estimated_from_its_events_however_read(
    translating_pod: TranslatingPod,
):
    """A provider that tells no usage is charged an estimate of one token per event its
    stream carried, counted by the translator: the same read in runs (one piece) as read one
    event at a time."""
    pod = translating_pod
    texts = [f"{WORDS[i % len(WORDS)]}{i}" for i in range(120)]
    events = [e for e in EVENTS["chat"](texts, [], 40) if b'"usage"' not in e]
    pod.script("chat", Reply.sse(events), Reply.sse([b"".join(events)]))
    for _ in range(2):
        got = await stream_through(pod, "messages", "plain", MODEL["chat"])
        assert got.error is None, got.error
    for record in pod.audit("plain"):
        assert record["usage"]["estimated"] is True
        assert record["usage"]["output_tokens"] == len(events)


def test_free_values_each_bad_utf8_alone_read_alike():
    """Each free value is checked alone: two values whose bytes are bad UTF-8 alone but good
    together (``\\xc3`` then ``\\xa9``) fail the stream as the events read whole do."""
    chunks = plain_chunks(12, obfuscation="OBF")
    chunks[5] = chunks[5].replace(b'"OBF"', b'"\xc3"')
    chunks[6] = chunks[6].replace(b'"OBF"', b'"\xa9"')
    assert_read_alike([CHAT_START, *chunks, DONE], "chat", "messages")


HOSTILE_BYTES = b'"\\\x00\x01\n\r\xff\xc3\xa90159-}{:,. e'


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(sorted(BENCH_EVENTS)),
    st.lists(
        st.tuples(
            st.integers(0, 1 << 20),
            st.integers(-4, 4),
            st.sampled_from(HOSTILE_BYTES),
            st.booleans(),
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["chat", "messages", "responses"]),
)
def test_a_run_with_any_bytes_changed_reads_alike(
    target: str, changes: list[tuple[int, int, int, bool]], caller: str
):
    """A hostile provider's run, a few bytes replaced or inserted near a quote, where values
    start and end (a quote, an escape, a control character, bad UTF-8, a digit, a sign, JSON
    punctuation): the stream translates as when every event is parsed whole, whatever the
    compiled reader finds in it."""
    if caller == target:
        caller = "chat" if target != "chat" else "messages"
    events = BENCH_EVENTS[target]
    stream = bytearray(b"".join([*events[:24], *events[-4:]]))
    quotes = [at for at, byte in enumerate(stream) if byte == ord('"')]
    for quote, offset, byte, insert in changes:
        at = min(max(quotes[quote % len(quotes)] + offset, 0), len(stream) - 1)
        stream[at : at + (not insert)] = bytes([byte])
    assert_read_alike([bytes(stream)], target, caller)
