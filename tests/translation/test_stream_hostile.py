"""A hostile or broken target stream (contract §18): garbage events, a stream without its end
marker, a giant event, the provider's own in-stream error. Whatever the target sends, the
caller gets a well-formed stream of its protocol that ends with its error and its end marker,
and its real SDK reports that error; nothing after the end is written."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from bench.streams import EVENTS as BENCH_EVENTS
from clawpod.sidecar.codecs.sse import EventReader, parse_events
from clawpod.sidecar.model.errors import ApiError
from clawpod.sidecar.model.neutral import Request
from clawpod.sidecar.translation.streams import MAX_EVENT_BYTES, stream_translator, translated_turn
from tests.support import responses as scripted_responses
from tests.support.codecs import codec_of
from tests.support.upstream import Reply, StubUpstream

API_OF = {"chat": "openai", "messages": "anthropic", "responses": "responses"}
DIRECTIONS = [(s, c) for s in API_OF for c in API_OF if s != c]

# The start of an answer with some text, per target protocol.
OPENING = {
    "chat": (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}\n\n'
    ),
    "messages": (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1",'
        b'"type":"message","role":"assistant","model":"m","content":[],"usage":'
        b'{"input_tokens":5,"output_tokens":1}}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"Hel"}}\n\n'
    ),
    "responses": b"".join(
        scripted_responses.sse(
            scripted_responses.response(scripted_responses.message("Hel"))
        ).split(b"\n\n")[i]
        + b"\n\n"
        for i in range(5)  # created, in_progress, item added, part added, the delta
    ),
}
# The provider's own in-stream error, per target protocol.
PROVIDER_ERROR = {
    "chat": b'data: {"error":{"message":"overloaded right now","type":"server_error"}}\n\n',
    "messages": (
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        b'"message":"overloaded right now"}}\n\n'
    ),
    "responses": (
        b'event: response.failed\ndata: {"type":"response.failed","response":{"id":"r",'
        b'"status":"failed","error":{"code":"server_error","message":"overloaded right now"}}}'
        b"\n\n"
    ),
}
GARBAGE = b"data: <html>\x00not json{{\n\n"
QUESTION = Request(model="m", system=[], messages=[])


def translator(source: str, caller: str) -> Any:
    return stream_translator(
        source,
        codec_of(API_OF[caller]),
        provider="hostile",
        model="m",
        include_usage=False,
    )


def assert_ends_with_error(caller: str, stream: bytes, words: str) -> None:
    """One lifecycle, opened once, its text kept, closed by the protocol's error and end."""
    events = list(parse_events(stream))
    names = [e for e, _ in events]
    assert words in events[-1 if caller != "chat" else -2][1]
    if caller == "chat":
        assert events[-1][1] == "[DONE]"
        assert '"content":"Hel"' in stream.decode()
    elif caller == "messages":
        assert names[0] == "message_start" and names.count("message_start") == 1
        assert names[-1] == "error"
        assert "Hel" in stream.decode()
    else:
        assert names[0] == "response.created" and names.count("response.created") == 1
        assert names[-1] == "response.failed"
        assert "Hel" in stream.decode()


@pytest.mark.parametrize(("source", "caller"), DIRECTIONS)
def test_garbage_event_ends_the_callers_stream_with_an_error(source: str, caller: str) -> None:
    translation = translator(source, caller)
    out = translation.feed(OPENING[source]) + translation.feed(GARBAGE)
    assert translation.closed
    assert translation.feed(OPENING[source]) == b""  # nothing after the end
    assert translation.finish() == b""
    assert_ends_with_error(caller, out, "not valid")


@pytest.mark.parametrize(("source", "caller"), DIRECTIONS)
def test_garbage_in_the_same_piece_keeps_what_came_before_it(source: str, caller: str) -> None:
    """A malformed event read in one piece with good ones: those before it still go out."""
    translation = translator(source, caller)
    out = translation.feed(OPENING[source] + GARBAGE + OPENING[source])
    assert translation.closed
    assert_ends_with_error(caller, out, "not valid")


@pytest.mark.parametrize(("source", "caller"), DIRECTIONS)
def test_garbage_after_the_end_in_the_same_piece_is_not_read(source: str, caller: str) -> None:
    """A piece is parsed before its protocol's home reads it: what follows the end in the
    same piece (garbage, another answer) still does not count."""
    whole = b"".join(BENCH_EVENTS[source])
    alone = translator(source, caller)
    expected = alone.feed(whole) + alone.finish()
    for after in (GARBAGE, whole, OPENING[source] + GARBAGE):
        translation = translator(source, caller)
        out = translation.feed(whole + after) + translation.finish()
        assert translation.complete
        assert translation.failure is None
        assert out == expected
        turn = translated_turn(source, codec_of(API_OF[caller]), QUESTION, provider="hostile")
        turn.feed(whole + after)
        assert turn.complete
        assert turn.end() is None


@pytest.mark.parametrize(("source", "caller"), DIRECTIONS)
def test_stream_without_its_end_marker_ends_with_an_error(source: str, caller: str) -> None:
    translation = translator(source, caller)
    out = translation.feed(OPENING[source]) + translation.finish()
    assert not translation.complete
    assert_ends_with_error(caller, out, "ended the stream before its end")


@pytest.mark.parametrize(("source", "caller"), DIRECTIONS)
def test_giant_event_is_refused_at_the_bound(source: str, caller: str) -> None:
    translation = translator(source, caller)
    out = translation.feed(OPENING[source]) + translation.feed(b"data: ")
    piece = b"x" * (1 << 20)
    fed = 0
    while not translation.closed:
        out += translation.feed(piece)
        fed += len(piece)
        assert fed <= MAX_EVENT_BYTES + len(piece), "the bound did not hold"
    assert_ends_with_error(caller, out, f"exceeds {MAX_EVENT_BYTES} bytes")


@pytest.mark.parametrize(("source", "caller"), DIRECTIONS)
def test_a_giant_event_in_small_pieces_is_kept_not_read_again_each_piece(
    monkeypatch: pytest.MonkeyPatch, source: str, caller: str
) -> None:
    """An event that never ends, sent in 16 KiB pieces after text, is kept as it comes: the
    event reader does not join and search what is pending again for each piece (that was
    quadratic: 3 s of CPU for one 8 MiB event), and the bound holds."""
    translation = translator(source, caller)
    for event in BENCH_EVENTS[source][:20]:
        translation.feed(event)
    assert translation.feed(b"data: ") == b""
    held: list[int] = []  # the bytes pending, joined, as each piece is fed
    feed = EventReader.feed

    def watched(reader: EventReader, data: bytes) -> list:
        held.append(len(reader._pending))
        return feed(reader, data)

    monkeypatch.setattr(EventReader, "feed", watched)
    piece, fed = b"x" * (16 << 10), 0
    while not translation.closed:
        translation.feed(piece)
        fed += len(piece)
    assert MAX_EVENT_BYTES <= fed <= MAX_EVENT_BYTES + len(piece)
    assert sum(held) <= 2 * fed


@pytest.mark.parametrize(("source", "caller"), DIRECTIONS)
def test_providers_in_stream_error_reaches_the_caller_in_its_shape(
    source: str, caller: str
) -> None:
    translation = translator(source, caller)
    out = translation.feed(OPENING[source]) + translation.feed(PROVIDER_ERROR[source])
    assert translation.complete and translation.closed
    assert_ends_with_error(caller, out, "overloaded right now")


@pytest.mark.parametrize(("source", "caller"), DIRECTIONS)
def test_upstream_failure_mid_stream_ends_the_callers_stream(source: str, caller: str) -> None:
    translation = translator(source, caller)
    out = translation.feed(OPENING[source])
    out += translation.fail(ApiError(504, "upstream_timeout", "provider 'p' went quiet"))
    assert translation.fail(ApiError(504, "again", "twice")) == b""
    assert_ends_with_error(caller, out, "went quiet")


@pytest.mark.parametrize("caller", list(API_OF))
async def test_the_callers_sdk_reports_the_failure(caller: str) -> None:
    """The real SDK reads the translated failure as the error it is, text first."""
    source = "messages" if caller != "messages" else "chat"
    translation = translator(source, caller)
    stream = translation.feed(OPENING[source]) + translation.feed(PROVIDER_ERROR[source])
    async with StubUpstream() as upstream:
        if caller == "messages":
            upstream.enqueue("anthropic", Reply.sse(stream))
            client = anthropic.AsyncAnthropic(
                base_url=upstream.anthropic_url, api_key="k", max_retries=0
            )
            text = []
            with pytest.raises(anthropic.APIStatusError, match="overloaded right now"):
                async with client.messages.stream(
                    model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
                ) as live:
                    async for piece in live.text_stream:
                        text.append(piece)
            assert text == ["Hel"]
            return
        openai_client = openai.AsyncOpenAI(base_url=upstream.openai_url, api_key="k", max_retries=0)
        if caller == "chat":
            upstream.enqueue("openai", Reply.sse(stream))
            pieces = []
            with pytest.raises(openai.APIError, match="overloaded right now"):
                chunks = await openai_client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], stream=True
                )
                async for chunk in chunks:
                    pieces.append(chunk.choices[0].delta.content if chunk.choices else None)
            assert "Hel" in pieces
            return
        upstream.enqueue("responses", Reply.sse(stream))
        events = await openai_client.responses.create(model="m", input="hi", stream=True)
        kinds = [event.type async for event in events]
        assert kinds[0] == "response.created" and kinds[-1] == "response.failed"
        assert "response.output_text.delta" in kinds
