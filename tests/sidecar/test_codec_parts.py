"""The codec's two parts: code that only passes requests through, answers errors or lists
models depends on the wire part (``WireCodec``), never on what mediation adds (``Codec``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clawpod.sidecar.codecs import CODECS
from clawpod.sidecar.codecs.base import Codec, WireCodec
from tests.support.codecs import codec_of

SIDECAR = Path(__file__).resolve().parents[2] / "sidecar"
WIRE_ONLY = [
    "server/llm/passthrough.py",
    "server/request/errors.py",
    "server/front/edge.py",
    "server/routes.py",
    "server/providers/upstream.py",
    "server/providers/unserved.py",
    "state/stored_objects.py",
    "codecs/usage.py",
]


@pytest.mark.parametrize("module", WIRE_ONLY)
def test_pass_through_code_knows_only_the_wire_part(module: str) -> None:
    assert re.search(r"\bCodec\b", (SIDECAR / module).read_text()) is None


def test_the_mediation_part_is_built_on_the_wire_part() -> None:
    assert issubclass(Codec, WireCodec)
    assert all(isinstance(codec, Codec) for codec in CODECS)
    mediation = {"parse_request", "render_request", "parse_response", "client_stream"}
    assert not mediation & set(dir(WireCodec))


def test_only_chat_completions_streams_are_asked_for_their_usage() -> None:
    """Chat Completions reports a stream's usage only when asked; the other protocols always
    do, so their pass-through bodies go as they are (#32)."""
    body = {"model": "m", "stream": True, "stream_options": {"other": 1}}
    chat = codec_of("openai")
    assert chat.asking_stream_usage(body) == {
        **body,
        "stream_options": {"other": 1, "include_usage": True},
    }
    assert chat.asking_stream_usage({**body, "stream_options": {"include_usage": True}}) is None
    for api in ("anthropic", "responses"):
        assert codec_of(api).asking_stream_usage(body) is None
        with pytest.raises(NotImplementedError):
            codec_of(api).usage_stripper()
