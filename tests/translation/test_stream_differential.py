"""The translation's differential test (#43): every recorded stream, translated in each of the
six directions, relayed (pass-through), read as a mediated request's turn, and whole, gives
what the translation gave when the harness was committed (``golden/differential.json``).

The golden file was written by the code before translation was folded into the codecs, so a
refolding that changes one byte a caller sees (after ids and timestamps are numbered in order
of appearance) fails here. Rewrite it only for a change meant to be seen, and say so:

    .venv/bin/python -m tests.translation.test_stream_differential
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from clawpod.sidecar.codecs.sse import parse_events
from clawpod.sidecar.model.conversation import CodecError
from clawpod.sidecar.translation import (
    Translated,
    Untranslatable,
    translate_reply,
    translate_request,
)
from clawpod.sidecar.translation.streams import stream_translator, translated_turn
from tests.support.codecs import codec_of
from tests.support.upstream import FIXTURES_DIR, load_fixture
from tests.translation.test_stream_golden import API_OF, LOCAL
from tests.translation.test_stream_golden import SOURCES as GOLDEN_SOURCES

GOLDEN = Path(__file__).resolve().parent / "golden" / "differential.json"
PIECE = 7  # bytes per read: events split across reads, as a network splits them
# The caller's first request, which the translation of its answer reads (tools it reshapes).
ASKED = {
    "chat": {"model": "asked-model", "messages": [{"role": "user", "content": "hi"}]},
    "messages": {
        "model": "asked-model",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "responses": {"model": "asked-model", "input": "hi"},
}
_DIRECTORY_PROTOCOL = {"anthropic": "messages", "openai": "chat", "openai_compatible": "chat"}
# Values written from the clock, or numbered by the writer: compared by order of appearance.
_CLOCK = frozenset({"created", "created_at"})
_NAMES = frozenset({"id", "item_id"})
# Fields one writer leaves out and another writes empty: the same to every reader of the shape.
_EMPTY_ALIKE = frozenset({"logprobs", "refusal"})


def _recorded_streams() -> Iterator[tuple[str, str, bytes]]:
    """Every streamed turn of the recorded provider exchanges, and every stream file."""
    for folder in ("derived",):
        for path in sorted((FIXTURES_DIR / folder).glob("*.sse")):
            yield _protocol_of(path.read_bytes()), f"{folder}/{path.name}", path.read_bytes()
    for path in sorted(LOCAL.glob("*.sse")):
        yield _protocol_of(path.read_bytes()), f"local_servers/{path.name}", path.read_bytes()
    for directory, protocol in _DIRECTORY_PROTOCOL.items():
        for path in sorted((FIXTURES_DIR / directory).glob("stream_*")):
            name = f"{directory}/{path.name}"
            for turn, exchange in enumerate(load_fixture(name)):
                if b"data:" in exchange.body:
                    yield protocol, f"{name}#{turn}", exchange.body


def _protocol_of(data: bytes) -> str:
    if b"message_start" in data:
        return "messages"
    return "responses" if b"response.created" in data else "chat"


def sources() -> list[tuple[str, str, bytes]]:
    """Every stream once (by its bytes), then each cut in half: a stream that stops short."""
    found: dict[bytes, tuple[str, str, bytes]] = {}
    for protocol, name, data in [*_recorded_streams(), *GOLDEN_SOURCES]:
        found.setdefault(data, (protocol, name, data))
    whole = sorted(found.values(), key=lambda source: source[1])
    cut = [(protocol, f"{name} (cut)", data[: len(data) // 2]) for protocol, name, data in whole]
    return whole + cut


def cases() -> list[tuple[str, str, str, bytes]]:
    return [
        (source, caller, name, data)
        for source, name, data in sources()
        for caller in API_OF
        if caller != source
    ]


def _key(source: str, caller: str, name: str) -> str:
    return f"{source}->{caller}:{name}"


# --- what a caller gets, three ways ------------------------------------------------------------


def relayed(source: str, caller: str, data: bytes) -> list[Any]:
    """A streamed pass-through: the caller's events."""
    translator = stream_translator(
        source,
        codec_of(API_OF[caller]),
        provider="recorded",
        model="asked-model",
        include_usage=True,
    )
    out = b"".join(translator.feed(piece) for piece in _pieces(data)) + translator.finish()
    return [[event, _parsed(payload)] for event, payload in parse_events(out)]


def mediated(source: str, caller: str, data: bytes) -> dict[str, Any]:
    """A mediated request's streamed call: the deltas shown, the failure or the whole turn."""
    caller_codec = codec_of(API_OF[caller])
    request = translate_request(ASKED[caller], caller, source).request
    turn = translated_turn(source, caller_codec, request, provider="recorded")
    shown: list[list[Any]] = []
    heads: list[Any] = []
    for piece in _pieces(data):
        deltas = turn.feed(piece)
        if deltas and not heads:  # as it was when the text began to show
            heads.append(orjson.loads(orjson.dumps(turn.head)))
        for delta in deltas:
            place = {"part": list(delta.part), "item_id": delta.item_id}
            shown.append([place, delta.text, list(delta.before)])
        if turn.failed:
            break
    seen: dict[str, Any] = {"shown": _joined(shown), "head": heads}
    failure = turn.end()
    if failure is not None:
        return {**seen, "failed": failure.message}
    try:
        return {**seen, "turn": turn.finish(), "events": turn.events > 0}
    except CodecError as exc:
        return {**seen, "invalid": str(exc), "events": turn.events > 0}


def whole(source: str, caller: str, data: bytes) -> Any:
    """The same answer, had it come whole: translated as a whole answer is."""
    try:
        body = codec_of(API_OF[source]).assemble_stream(data)
    except (CodecError, ValueError, KeyError) as exc:
        return {"not assembled": type(exc).__name__}
    call = translate_request(ASKED[caller], caller, source)
    translated = Translated(call.body, caller, source, call.request, call.dropped)
    try:
        return translate_reply(body, translated)
    except Untranslatable as exc:
        return {"untranslatable": str(exc)}


def observed(source: str, caller: str, data: bytes) -> Any:
    seen = {
        "relayed": relayed(source, caller, data),
        "mediated": mediated(source, caller, data),
        "whole": whole(source, caller, data),
    }
    # Each way is numbered on its own: a writer may name what another wrote, not the same.
    return {way: _numbered(orjson.loads(orjson.dumps(got)), {}) for way, got in seen.items()}


def _pieces(data: bytes) -> Iterator[bytes]:
    for start in range(0, len(data), PIECE):
        yield data[start : start + PIECE]


def _parsed(payload: str) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload


def _joined(shown: list[list[Any]]) -> list[list[Any]]:
    """Deltas of one part that follow each other, as one: how a protocol groups its pieces
    into events is not what a caller sees."""
    joined: list[list[Any]] = []
    for delta in shown:
        if joined and joined[-1][0] == delta[0] and not delta[2]:
            joined[-1][1] += delta[1]
        else:
            joined.append(delta)
    return joined


def _numbered(value: Any, names: dict[str, str]) -> Any:
    """``value`` with clock values zeroed, written ids numbered by first appearance, and
    empty fields that mean the same as none left out."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in _EMPTY_ALIKE or v not in (None, [])}
        return {
            key: (
                0
                if key in _CLOCK
                else _name(item, names)
                if key in _NAMES and isinstance(item, str)
                else _numbered(item, names)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_numbered(item, names) for item in value]
    return value


def _name(value: str, names: dict[str, str]) -> str:
    return names.setdefault(value, f"<id {len(names)}>")


# --- the test ----------------------------------------------------------------------------------


def _golden() -> dict[str, Any]:
    return orjson.loads(GOLDEN.read_bytes())  # type: ignore[no-any-return]


CASES = cases()


def test_the_golden_file_holds_every_case() -> None:
    """A stream added to the fixtures is added to the golden file too (rewrite it)."""
    assert sorted(_golden()) == sorted(_key(s, c, n) for s, c, n, _ in CASES)


@pytest.mark.parametrize(
    ("source", "caller", "name", "data"),
    [pytest.param(*case, id=_key(*case[:3])) for case in CASES],
)
def test_a_translation_gives_what_it_gave(source: str, caller: str, name: str, data: bytes) -> None:
    assert observed(source, caller, data) == _golden()[_key(source, caller, name)]


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    written = {_key(s, c, n): observed(s, c, d) for s, c, n, d in CASES}
    GOLDEN.write_bytes(orjson.dumps(written, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
