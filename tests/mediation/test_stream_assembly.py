"""Every recorded provider stream, fed to the incremental assembler in pieces of any size
(a CRLF, a UTF-8 character or an escaped quote split across reads), folds into the same body
as the whole stream, and hands out exactly the text the body holds."""

from __future__ import annotations

import orjson
import pytest

from tests.mediation.test_codecs import SUCCESSES, label
from tests.support.codecs import codec_of
from tests.support.upstream import Recorded

STREAMS = [e for e in SUCCESSES if e.stream]


def answer_text(api: str, body: dict) -> str:
    if api == "openai":
        return body["choices"][0]["message"].get("content") or ""
    return "".join(b.get("text", "") for b in body["content"] if b.get("type") == "text")


@pytest.mark.parametrize("size", [1, 7, 4096])
@pytest.mark.parametrize("exchange", STREAMS, ids=label)
def test_pieces_fold_like_the_whole_stream(exchange: Recorded, size: int) -> None:
    codec = codec_of(exchange.api)
    whole = codec.assemble_stream(exchange.body)
    assembler = codec.stream_assembler()
    shown = ""
    for start in range(0, len(exchange.body), size):
        shown += "".join(d.text for d in assembler.feed(exchange.body[start : start + size]))
    assert assembler.finish() == whole
    assert shown == answer_text(exchange.api, whole)


def test_the_streams_cover_the_recorded_quirks() -> None:
    sources = {e.source for e in STREAMS}
    assert any("openrouter" in s for s in sources)  # repeated ids, no finish_reason
    assert any("escaped_quotes" in s for s in sources)
    assert any("input_json_delta" in s for s in sources)


def test_a_call_whose_id_and_name_repeat_in_every_chunk_is_one_call() -> None:
    """llama-cpp-python repeats the call's id and name on every fragment."""
    fragments = ['{"symbol":', ' "A\\"B"}']
    chunks = [
        b'data: {"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_0",'
        b'"type":"function","function":{"name":"desk_quote","arguments":'
        + orjson.dumps(piece)
        + b"}}]}}]}\n\n"
        for piece in fragments
    ]
    assembler = codec_of("openai").stream_assembler()
    for chunk in [*chunks, b"data: [DONE]\n\n"]:
        assert assembler.feed(chunk) == []
    (call,) = assembler.finish()["choices"][0]["message"]["tool_calls"]
    assert (call["id"], call["function"]["name"]) == ("call_0", "desk_quote")
    assert orjson.loads(call["function"]["arguments"]) == {"symbol": 'A"B'}
