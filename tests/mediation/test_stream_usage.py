"""Usage read from streams as they pass: however the network splits the bytes, the tokens
counted equal those the provider reported (checked on every recorded stream)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawpod.sidecar.codecs.usage import StreamUsage
from tests.support.codecs import codec_of
from tests.support.upstream import Recorded, fixture_files, load_fixture

STREAMS = [e for name in fixture_files() for e in load_fixture(name) if e.stream]
USAGE_NAMES = {
    "openai": ("prompt_tokens", "completion_tokens"),
    "anthropic": ("input_tokens", "output_tokens"),
}
BODIES = [e for name in fixture_files() for e in load_fixture(name) if not e.stream]


def _reported(exchange: Recorded) -> tuple[int, int]:
    """Tokens as the provider reported them, read the slow way: every event parsed."""
    input_tokens = output_tokens = 0
    for line in exchange.body.split(b"\n"):
        if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
            continue
        event = orjson.loads(line[5:])
        usage = (event.get("message") or event).get("usage") or {}
        input_name, output_name = USAGE_NAMES[exchange.api]
        input_tokens = usage.get(input_name) or input_tokens
        output_tokens = usage.get(output_name) or output_tokens
    return input_tokens, output_tokens


@pytest.mark.parametrize("exchange", STREAMS, ids=[f"{e.source}#{e.turn}" for e in STREAMS])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_stream_usage_survives_any_split(exchange: Recorded, data: st.DataObject) -> None:
    body = exchange.body
    cuts = sorted(data.draw(st.sets(st.integers(1, len(body) - 1), max_size=40)))
    usage = StreamUsage(codec_of(exchange.api))
    for start, end in zip([0, *cuts], [*cuts, len(body)], strict=True):
        usage.feed(body[start:end])
    assert (usage.input_tokens, usage.output_tokens) == _reported(exchange)


def test_recorded_streams_report_usage() -> None:
    # Guards the property above against vacuity: most recordings do carry usage.
    with_usage = [e for e in STREAMS if _reported(e) != (0, 0)]
    assert len(with_usage) >= len(STREAMS) - 2


@pytest.mark.parametrize("exchange", BODIES, ids=[f"{e.source}#{e.turn}" for e in BODIES])
def test_body_usage(exchange: Recorded) -> None:
    body = exchange.json
    usage = body.get("usage") or {}
    input_name, output_name = USAGE_NAMES[exchange.api]
    expected = (usage.get(input_name, 0), usage.get(output_name, 0))
    assert codec_of(exchange.api).usage_of_body(body) == expected
