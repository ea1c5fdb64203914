"""Text events read from a learnt template (``stream_readers._TextTemplate``: a payload of the
same bytes around another JSON string is read without parsing the rest) translate exactly as
when every event is parsed whole, whatever the stream holds around, between and inside them:
escapes and characters the template's writer would write otherwise, other fields that change
per chunk (OpenAI's ``obfuscation``), reasoning, calls, usage, finish reasons, and payloads
that fit the template's bytes but hold no string in its place."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawpod.sidecar.translation import stream_readers
from clawpod.sidecar.translation.streams import stream_translator
from tests.support.codecs import codec_of

API_OF = {"chat": "openai", "messages": "anthropic", "responses": "responses"}
REASONING_ID = re.compile(rb'"rs_[0-9a-f]+"')  # made fresh for each reasoning item
TEXTS = st.sampled_from(["The", " quarterly", "", 'a "quote"', "back\\slash", "é ☃ 𝄞", "\n"])


def translate(events: list[bytes], target: str, caller: str, *, templates: bool) -> bytes:
    translator = stream_translator(
        target, codec_of(API_OF[caller]), provider="p", model="m", include_usage=True
    )
    template = stream_readers._TextTemplate
    read, read_run = template.read, template.read_run
    if not templates:  # nor runs of them (test_stream_text_runs.py)
        template.read = lambda self, payload: None  # type: ignore[method-assign]
        template.read_run = lambda self, data: ([], 0, 0)  # type: ignore[method-assign]
    try:
        out = b"".join(translator.feed(event) for event in events) + translator.finish()
        return REASONING_ID.sub(b'"rs_"', out)
    finally:
        template.read, template.read_run = read, read_run  # type: ignore[method-assign]


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
    # The same bytes as the text in another place first: no template is learnt around them.
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


@settings(max_examples=150, deadline=None)
@given(st.lists(CHAT_PIECES, max_size=25), st.sampled_from(["messages", "responses"]))
def test_chat_streams_read_alike(pieces: list[bytes], caller: str):
    events = [chat_chunk({"role": "assistant", "content": ""}), *pieces, b"data: [DONE]\n\n"]
    expected = translate(events, "chat", caller, templates=False)
    assert translate(events, "chat", caller, templates=True) == expected


@settings(max_examples=150, deadline=None)
@given(st.lists(MESSAGES_PIECES, max_size=25), st.sampled_from(["chat", "responses"]))
def test_messages_streams_read_alike(pieces: list[bytes], caller: str):
    events = [MESSAGES_START, *pieces, MESSAGES_END]
    expected = translate(events, "messages", caller, templates=False)
    assert translate(events, "messages", caller, templates=True) == expected


@settings(max_examples=150, deadline=None)
@given(
    st.lists(RESPONSES_PIECES, max_size=25),
    st.sampled_from(list(RESPONSES_ORDERS)),
    st.sampled_from(["chat", "messages"]),
)
def test_responses_streams_read_alike(pieces: list[bytes], order: str, caller: str):
    first = [responses_delta(w, 4 + n, order) for n, w in enumerate(["The", " quarterly"])]
    events = [*RESPONSES_START, *first, *pieces, *RESPONSES_END]
    expected = translate(events, "responses", caller, templates=False)
    assert translate(events, "responses", caller, templates=True) == expected


@pytest.mark.parametrize(
    "slot",
    [b"123", b'{"x":1}', b"null", b'"a","b"', b'"unended', b'["a"]', b'"a"}}, {"b":"c"'],
)
def test_what_fits_the_bytes_but_holds_no_string_is_read_whole(slot: bytes):
    learnt = [text_delta("The", 0), text_delta(" quarterly", 0)]
    odd = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    odd += b'"delta":{"type":"text_delta","text":' + slot + b"}}\n\n"
    events = [MESSAGES_START, *learnt, odd, text_delta(" figures", 0), MESSAGES_END]
    expected = translate(events, "messages", "chat", templates=False)
    assert translate(events, "messages", "chat", templates=True) == expected


def test_a_learnt_template_reads_the_text_events():
    """The template is used (not only harmless): a stream of text chunks parses the first
    whole and reads the rest from it."""
    template = stream_readers._TextTemplate()
    first = orjson.loads(chat_chunk({"content": "The"})[6:-2])
    payload = chat_chunk({"content": "The"})[6:-2].decode()
    template.learn(payload, first, first["choices"][0]["delta"], "content")
    assert template.read(chat_chunk({"content": ' "x" é'})[6:-2].decode()) == ' "x" é'
    assert template.read(chat_chunk({"content": "y"}, usage=None)[6:-2].decode()) is None


def test_the_same_bytes_elsewhere_first_teach_no_template():
    """The text's bytes also stand in another field, before it: a template around those
    would read that field as the text of every later chunk."""

    def chunk(extra: str, text: str) -> bytes:
        data = {"extra": {"content": extra}, "choices": [{"delta": {"content": text}}]}
        return b"data: " + orjson.dumps(data) + b"\n\n"

    events = [chunk("The", "The"), chunk("Other", "The"), b"data: [DONE]\n\n"]
    expected = translate(events, "chat", "messages", templates=False)
    assert b"Other" not in expected
    assert translate(events, "chat", "messages", templates=True) == expected


def test_openai_chunks_read_from_the_template_whatever_their_obfuscation():
    """OpenAI sends each chunk with another ``obfuscation`` (random, of varying length): the
    template reads past it, and falls back to a whole read where its value needs escapes or
    is not a plain string; the translated stream is the same as when read whole."""
    obfuscations = ["xY3k", "a", "", 'q"uote', "back\\slash", "\u2028", "\x01", "é☃"]
    texts = ["The", " quarterly", ' "figures"', " é ☃", "\n"]
    events = [chat_chunk({"role": "assistant", "content": ""}, obfuscation="z")]
    events += [
        chat_chunk({"content": texts[i % len(texts)]}, obfuscation=o)
        for i, o in enumerate(obfuscations * 3)
    ]
    events.append(chat_chunk({}, obfuscation=7))  # not a string: read whole
    events.append(b"data: [DONE]\n\n")
    expected = translate(events, "chat", "messages", templates=False)
    assert translate(events, "chat", "messages", templates=True) == expected
    for broken in (b'a"b', b"a\x01b", b"a\\"):  # not JSON: the stream fails as read whole
        chunk = chat_chunk({"content": "The"}, obfuscation="OBF").replace(b"OBF", broken)
        stream = [*events[:4], chunk, *events[4:]]
        expected = translate(stream, "chat", "messages", templates=False)
        assert b"not valid" in expected
        assert translate(stream, "chat", "messages", templates=True) == expected

    template = stream_readers._TextTemplate(free="obfuscation")
    data = chat_chunk({"content": "The"}, obfuscation="xY3k")[6:-2]
    first = orjson.loads(data)
    template.learn(data.decode(), first, first["choices"][0]["delta"], "content")
    later = chat_chunk({"content": " growth"}, obfuscation="Qw9tZ1")[6:-2].decode()
    assert template.read(later) == " growth"
    assert template.read(later.replace('"obfuscation"', '"other"')) is None


@pytest.mark.parametrize("order", list(RESPONSES_ORDERS))
def test_a_learnt_template_reads_runs_of_responses_deltas_wherever_their_number_stands(
    order: str,
):
    """A Responses delta's ``sequence_number`` differs in every event, before or after its
    text: a run reads past it, and only an integer as JSON writes it there; an event that
    differs anywhere else ends the run before it."""
    template = stream_readers._TextTemplate(free="obfuscation", numbered="sequence_number")
    payload = responses_delta("The", 4, order).split(b"data: ")[1][:-2].decode()
    first = orjson.loads(payload)
    template.learn(payload, first, first, "delta")
    assert template.reads_runs

    def run(middle: bytes) -> tuple[list[str], int]:
        events = [responses_delta("a", 10, order), middle, responses_delta("b", 12, order)]
        texts, count, used = template.read_run(b"".join(events))
        assert used == len(b"".join(events[:count]))
        return [orjson.loads(text) for text in texts], count

    assert run(responses_delta("x é", 123456, order)) == (["a", "x é", "b"], 3)
    quoted = run(responses_delta(' "x" é', 11, order))  # a run may end at an escaped quote
    assert quoted in ((["a", ' "x" é', "b"], 3), (["a"], 1))
    obfuscated = run(responses_delta("y", 11, order, obfuscation="Qw9tZ1"))
    if order == "plain":  # a field it never had: not the template's event
        assert obfuscated[1] <= 1
    else:
        assert obfuscated == (["a", "y", "b"], 3)
    for other in (b"01", b"1.5", b"-1", b'"7"', b"null", b"1e3"):
        odd = responses_delta("y", 777, order).replace(b":777", b":" + other)
        assert run(odd)[1] <= 1, other  # the run stops before it, or is read whole
    for changed in ({"item_id": "msg_2"}, {"output_index": 1}, {"annotations": []}):
        assert run(responses_delta("y", 11, order, **changed))[1] <= 1, changed


@pytest.mark.parametrize("target", ["messages", "responses"])
def test_a_text_event_named_only_by_its_event_line_teaches_no_template(target: str):
    """A payload without ``type`` is read as its event's name says: the same payload under
    another name is another event, which a template (it ignores names) would read as text."""
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
    expected = translate(events, target, caller, templates=False)
    assert expected.count(b'"The"') == 3
    assert translate(events, target, caller, templates=True) == expected
