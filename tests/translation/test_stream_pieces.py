"""A provider's stream translates the same however it is cut into pieces (one event a piece,
a few events cut inside one, the whole answer at once, a cut at every byte) and whatever it
holds inside and between its events: escapes, characters outside ASCII, raw control
characters and bad UTF-8 (the stream fails the same), named events, CR line ends, OpenAI's
``obfuscation`` of any value, a hostile provider's bytes changed anywhere."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.streams import EVENTS as BENCH_EVENTS
from clawpod.sidecar.codecs.sse import parse_events
from clawpod.sidecar.translation.streams import stream_translator
from tests.support.codecs import codec_of
from tests.support.upstream import Reply
from tests.translation.conftest import DIRECTIONS, MODEL, TranslatingPod
from tests.translation.streams import EVENTS, stream_through

API_OF = {"chat": "openai", "messages": "anthropic", "responses": "responses"}
REASONING_ID = re.compile(rb'"rs_[0-9a-f]+"')  # made fresh for each reasoning item
TEXTS = st.sampled_from(["The", " quarterly", "", 'a "quote"', "back\\slash", "é ☃ 𝄞", "\n"])


def translate(events: list[bytes], target: str, caller: str) -> bytes:
    """``events`` fed one at a time: the reference the same stream cut otherwise must match."""
    translator = stream_translator(
        target, codec_of(API_OF[caller]), provider="p", model="m", include_usage=True
    )
    out = b"".join(translator.feed(event) for event in events) + translator.finish()
    return REASONING_ID.sub(b'"rs_"', out)


def chat_chunk(delta: dict[str, Any], **fields: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return b"data: " + orjson.dumps({**chunk, "choices": [choice], **fields}) + b"\n\n"


def text_delta(text: str, index: int) -> bytes:
    delta = {"type": "content_block_delta", "index": index}
    data = {**delta, "delta": {"type": "text_delta", "text": text}}
    return b"event: content_block_delta\ndata: " + orjson.dumps(data) + b"\n\n"


CHAT_PIECES = st.one_of(
    TEXTS.map(lambda t: chat_chunk({"content": t})),
    TEXTS.map(lambda t: chat_chunk({"content": t}, obfuscation=t[::-1] + "x")),
    TEXTS.map(lambda t: chat_chunk({"content": t}, usage=None)),
    TEXTS.map(lambda t: chat_chunk({"reasoning_content": t})),
    TEXTS.map(lambda t: chat_chunk({"role": "assistant", "content": t})),
    TEXTS.map(lambda t: chat_chunk({"refusal": t})),
    st.just(chat_chunk({}, usage={"prompt_tokens": 3, "completion_tokens": 2})),
    st.just(chat_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]})),
    TEXTS.map(
        lambda t: (
            b'data: {"id":"chatcmpl-1", "choices":[{"delta":{"content":%s}}]}\n\n' % orjson.dumps(t)
        )
    ),
    # The same bytes as the text in another place first.
    st.tuples(TEXTS, TEXTS).map(
        lambda tu: (
            b'data: {"extra":{"content":%s},"choices":[{"delta":{"content":%s}}]}\n\n'
            % (orjson.dumps(tu[0]), orjson.dumps(tu[1]))
        )
    ),
)
MESSAGES_PIECES = st.one_of(
    st.tuples(TEXTS, st.integers(0, 2)).map(lambda ti: text_delta(*ti)),
    st.integers(0, 2).map(
        lambda i: (
            b"event: content_block_stop\ndata: "
            + orjson.dumps({"type": "content_block_stop", "index": i})
            + b"\n\n"
        )
    ),
)
# The orders a Responses text delta's fields come in: OpenAI's (``sequence_number`` in the
# head, ``obfuscation`` last), the bench's upstream's (the number last), fields sorted by name
# (as Codex logs them), and a server that obfuscates nothing (tests/support/responses.py).
RESPONSES_ORDERS = {
    "openai": ("sequence_number", "item_id", "output_index", "content_index", "delta"),
    "bench": ("item_id", "output_index", "content_index", "delta", "logprobs", "obfuscation"),
    "sorted": ("content_index", "delta", "item_id", "logprobs", "obfuscation", "output_index"),
    "plain": ("sequence_number", "item_id", "output_index", "content_index", "delta"),
}
DROP = object()  # a field left out of an event


def responses_event(kind: str, **fields: Any) -> bytes:
    data = {"type": kind, **fields}
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def responses_delta(text: str, number: int, order: str = "openai", **changes: Any) -> bytes:
    """A ``response.output_text.delta`` of item msg_1 with its fields in ``order``; ``changes``
    replace fields (``DROP``: leave one out) or add them at the end."""
    fields: dict[str, Any] = {"sequence_number": number, "item_id": "msg_1", "output_index": 0}
    fields |= {"content_index": 0, "delta": text, "logprobs": []}
    if order != "plain":
        fields["obfuscation"] = "xY3k"
    ordered = [*RESPONSES_ORDERS[order], *(k for k in fields if k not in RESPONSES_ORDERS[order])]
    data = {key: fields[key] for key in ordered} | changes
    kept = {key: value for key, value in data.items() if value is not DROP}
    return responses_event("response.output_text.delta", **kept)


_RESPONSE = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "output": []}
_ITEM = {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant"}
_AT = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
_PART = {"type": "output_text", "text": "", "annotations": []}
RESPONSES_START = [
    responses_event("response.created", sequence_number=0, response=_RESPONSE),
    responses_event("response.in_progress", sequence_number=1, response=_RESPONSE),
    responses_event(
        "response.output_item.added",
        sequence_number=2,
        output_index=0,
        item={**_ITEM, "content": []},
    ),
    responses_event("response.content_part.added", sequence_number=3, **_AT, part=_PART),
]
_USAGE = {"input_tokens": 5, "output_tokens": 9, "total_tokens": 14}
RESPONSES_END = [
    responses_event("response.output_text.done", sequence_number=900, **_AT, text="..."),
    responses_event("response.content_part.done", sequence_number=901, **_AT, part=_PART),
    responses_event(
        "response.output_item.done",
        sequence_number=902,
        output_index=0,
        item={**_ITEM, "content": [_PART]},
    ),
    responses_event(
        "response.completed",
        sequence_number=903,
        response={**_RESPONSE, "status": "completed", "usage": _USAGE},
    ),
]
RESPONSES_PIECES = st.one_of(
    st.tuples(TEXTS, st.integers(0, 1 << 40), st.sampled_from(list(RESPONSES_ORDERS))).map(
        lambda tno: responses_delta(*tno)
    ),
    st.tuples(TEXTS, st.sampled_from([1.5, -1, "7", None, True, DROP])).map(
        lambda tn: responses_delta(tn[0], 0, sequence_number=tn[1])
    ),
    st.tuples(
        TEXTS, st.sampled_from([("item_id", "msg_2"), ("output_index", 1), ("obfuscation", 7)])
    ).map(lambda tf: responses_delta(tf[0], 5, **{tf[1][0]: tf[1][1]})),
    TEXTS.map(
        lambda t: responses_event("response.refusal.delta", sequence_number=4, **_AT, delta=t)
    ),
    st.just(responses_event("response.output_text.done", sequence_number=5, **_AT, text="x")),
)
MESSAGES_START = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1",'
    b'"type":"message","role":"assistant","model":"m","content":[],"usage":'
    b'{"input_tokens":5,"output_tokens":1}}}\n\n'
)
MESSAGES_END = (
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":9}}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n'
)


CHAT_START = chat_chunk({"role": "assistant", "content": ""}, obfuscation="z")
DONE = b"data: [DONE]\n\n"
WORDS = ["The", " quarterly", " figures", " show", " growth", ",", " and", " more"]


def in_pieces(stream: bytes, cuts: list[int], target: str, caller: str) -> bytes:
    """``stream`` fed cut at ``cuts`` (offsets)."""
    translator = stream_translator(
        target, codec_of(API_OF[caller]), provider="p", model="m", include_usage=True
    )
    bounds = [0, *sorted({c % (len(stream) + 1) for c in cuts}), len(stream)]
    out = b"".join(translator.feed(stream[a:b]) for a, b in itertools.pairwise(bounds))
    return REASONING_ID.sub(b'"rs_"', out + translator.finish())


def assert_read_alike(events: list[bytes], target: str, caller: str) -> None:
    expected = translate(events, target, caller)  # one event a piece
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
    expected = translate(events, "chat", caller)
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
    expected = translate(events, "messages", caller)
    assert in_pieces(b"".join(events), cuts, "messages", caller) == expected


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
    expected = translate(events, "responses", caller)
    assert in_pieces(b"".join(events), cuts, "responses", caller) == expected


def _delta(text: str = "x", **changes: Any) -> Callable[[str], bytes]:
    return lambda order: responses_delta(text, 10, order, **changes)


def _changed(old: bytes, new: bytes, text: str = "x") -> Callable[[str], bytes]:
    return lambda order: responses_delta(text, 10, order).replace(old, new)


ODD_DELTAS = {
    # Another item, output or part, or a field more or less.
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
    # A delta's own bytes, and an event's end, inside the text.
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
def test_odd_responses_deltas_among_text_read_alike(odd: str, order: str, caller: str):
    """Whatever one event among Responses deltas holds, the stream translates the same in
    any pieces (or fails the same)."""
    deltas = plain_deltas(16, order)
    deltas[6] = ODD_DELTAS[odd](order)
    assert_read_alike([*RESPONSES_START, *deltas, *RESPONSES_END], "responses", caller)


@pytest.mark.parametrize(
    "odd",
    [
        b'"a \\"quoted\\" word"',
        b'"caf\\u00e9 \\/ \\n"',  # escapes: written as orjson writes them
        '"é ☃ 𝄞 \u2028"'.encode(),  # beyond ASCII, as it is
        b'"raw\x01control"',  # not JSON: the stream fails
        b'"raw\nline"',
        b'"bad \xff utf-8"',
        b'"bad \xc3"',
    ],
)
@pytest.mark.parametrize("caller", ["messages", "responses"])
def test_odd_texts_among_text_read_alike(odd: bytes, caller: str):
    chunks = plain_chunks(12)
    chunks[6] = chat_chunk({"content": "SLOT"}).replace(b'"SLOT"', odd)
    assert_read_alike([CHAT_START, *chunks, DONE], "chat", caller)


@pytest.mark.parametrize(
    "obfuscation",
    [b"xY3k", b"", b'q"uote', b"back\\\\slash", b"\xe2\x80\xa8", b"\x01", b"\xc3\xa9", b"\xff"],
)
def test_any_obfuscation_among_text_reads_alike(obfuscation: bytes):
    chunks = plain_chunks(12, obfuscation="OBF")
    chunks[5] = chunks[5].replace(b'"OBF"', b'"' + obfuscation + b'"')
    assert_read_alike([CHAT_START, *chunks, DONE], "chat", "messages")


@pytest.mark.parametrize("name", [b"content_block_delta", b"", b"other", b"caf\xc3\xa9", b"\xff"])
def test_messages_text_of_any_event_name_reads_alike(name: bytes):
    deltas = [text_delta(w, 0) for w in WORDS * 2]
    deltas[9] = deltas[9].replace(b"event: content_block_delta", b"event: " + name)
    assert_read_alike([MESSAGES_START, *deltas, MESSAGES_END], "messages", "chat")


@pytest.mark.parametrize("target", ["chat", "messages", "responses"])
def test_a_stream_cut_anywhere_reads_alike(target: str):
    """Every place a piece can end: inside a text, the fields after it, an event's end or its
    blank line, the next event's head; in pieces of any size."""
    if target == "chat":
        events = [CHAT_START, *plain_chunks(24, obfuscation="xY3k"), DONE]
    elif target == "responses":
        events = [*RESPONSES_START, *plain_deltas(20), *RESPONSES_END]
    else:
        texts = [text_delta(w, 0) for w in WORDS * 5]
        events = [MESSAGES_START, *texts, MESSAGES_END]
    caller = "messages" if target == "chat" else "chat"
    expected = translate(events, target, caller)
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


def test_bad_utf8_fails_a_stream_alike_however_it_is_cut():
    """The failure names the bad byte, not its place in whatever was decoded, which moves with
    the pieces (a CR after it in the same piece has the reader decode the piece line by
    line)."""
    chunks = plain_chunks(12, obfuscation="xY3k")
    chunks[5] = chunks[5].replace(b'"xY3k"', b'"xY3k\xff')
    chunks[6] = chunks[6].replace(b'"xY3k"', b'"xY3k\r')
    assert_read_alike([b"".join([CHAT_START, *chunks, DONE])], "chat", "messages")


def test_empty_texts_and_calls_among_text_read_alike():
    call = chat_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]})
    args = chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1}'}}]})
    chunks = plain_chunks(20)
    chunks[4] = chat_chunk({"content": ""})
    chunks[9:9] = [call, args]
    for caller in ("messages", "responses"):
        assert_read_alike([CHAT_START, *chunks, DONE], "chat", caller)


LLAMA_CPP_PYTHON = Path(__file__).parents[1] / "fixtures/local_servers"


@pytest.mark.parametrize("caller", ["messages", "responses"])
def test_a_real_llama_cpp_python_stream_reads_alike_however_it_is_cut(caller: str):
    """A stream recorded from llama-cpp-python, whose JSON has a space after each colon and
    comma (``json.dumps``'s default)."""
    recorded = (LLAMA_CPP_PYTHON / "llama_cpp_python.chat_text.recorded.sse").read_bytes()
    events = [event + b"\n\n" for event in recorded.split(b"\n\n") if event]
    assert b'" time"' in translate(events, "chat", caller)  # one of its texts
    assert_read_alike(events, "chat", caller)


def test_a_stream_cut_short_and_events_after_its_end_read_alike():
    """A stream cut by its end inside an event, and events after the end marker (they do not
    count)."""
    events = [CHAT_START, *plain_chunks(30), DONE]
    stream = b"".join(events)
    cut = stream[: len(stream) - 100]
    expected = translate([cut], "chat", "messages")
    assert in_pieces(cut, [], "chat", "messages") == expected
    after = [*events, *plain_chunks(5)]
    assert_read_alike(after, "chat", "messages")


@pytest.mark.parametrize(("caller", "target"), DIRECTIONS)
async def test_a_stream_in_one_piece_is_charged_as_one_sent_event_by_event(
    translating_pod: TranslatingPod, caller: str, target: str
):
    """The provider's usage is read from the events the translator parses: a long answer sent
    in one piece is charged and reaches the caller exactly as the same answer sent one event
    per write."""
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
    """The Responses writer writes each text delta with one format of the message's delta,
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


async def test_a_stream_without_usage_is_estimated_from_what_it_wrote_however_read(
    translating_pod: TranslatingPod,
):
    """A provider that tells no usage is charged an estimate of what its model wrote (four
    characters a token, model/token_estimate.py): the same in one piece as one event a piece."""
    pod = translating_pod
    texts = [f"{WORDS[i % len(WORDS)]}{i}" for i in range(120)]
    events = [e for e in EVENTS["chat"](texts, [], 40) if b'"usage"' not in e]
    pod.script("chat", Reply.sse(events), Reply.sse([b"".join(events)]))
    for _ in range(2):
        got = await stream_through(pod, "messages", "plain", MODEL["chat"])
        assert got.error is None, got.error
    for record in pod.audit("plain"):
        assert record["usage"]["estimated"] is True
        assert record["usage"]["output_tokens"] == round(len("".join(texts)) / 4)


def test_values_each_bad_utf8_alone_fail_alike():
    """Each event is decoded alone: two values whose bytes are bad UTF-8 alone but good
    together (``\\xc3`` then ``\\xa9``) fail the stream however it is cut."""
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
def test_a_stream_with_any_bytes_changed_reads_alike(
    target: str, changes: list[tuple[int, int, int, bool]], caller: str
):
    """A hostile provider's stream, a few bytes replaced or inserted near a quote, where values
    start and end (a quote, an escape, a control character, bad UTF-8, a digit, a sign, JSON
    punctuation, a line end): it translates, or fails, the same in any pieces."""
    if caller == target:
        caller = "chat" if target != "chat" else "messages"
    events = BENCH_EVENTS[target]
    stream = bytearray(b"".join([*events[:24], *events[-4:]]))
    quotes = [at for at, byte in enumerate(stream) if byte == ord('"')]
    for quote, offset, byte, insert in changes:
        at = min(max(quotes[quote % len(quotes)] + offset, 0), len(stream) - 1)
        stream[at : at + (not insert)] = bytes([byte])
    assert_read_alike([bytes(stream)], target, caller)


@pytest.mark.parametrize("target", ["messages", "responses"])
def test_a_text_event_named_only_by_its_event_line_is_read_as_its_name_says(target: str):
    """A payload without ``type`` is read as its event's name says: the same payload under
    another name is another event, not text."""
    if target == "messages":
        kind, other = "content_block_delta", "ping"
        payload = {"index": 0, "delta": {"type": "text_delta", "text": "The"}}
        events = [
            MESSAGES_START,
            *(
                b"event: %s\ndata: " % k.encode() + orjson.dumps(payload) + b"\n\n"
                for k in (kind, kind, other, kind)
            ),
            MESSAGES_END,
        ]
    else:
        kind, other = "response.output_text.delta", "response.output_text.done"
        payload = {**_AT, "delta": "The"}
        events = [
            *RESPONSES_START,
            *(
                b"event: %s\ndata: " % k.encode() + orjson.dumps(payload) + b"\n\n"
                for k in (kind, kind, other, kind)
            ),
            *RESPONSES_END,
        ]
    caller = "chat"
    assert translate(events, target, caller).count(b'"The"') == 3
    assert_read_alike(events, target, caller)
