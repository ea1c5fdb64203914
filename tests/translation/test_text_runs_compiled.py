"""The compiled run reader (``translation/_text_runs.c``) on its own: what it is made from is
checked, what it reads is only bytes, a run of any length comes out whole, and reading runs
keeps no memory. How its runs translate is ``test_stream_text_runs.py``'s."""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from clawpod.sidecar.translation import _text_runs
from clawpod.sidecar.translation._text_runs import FREE, NUMBER, RunReader

PREFIX = b'data: {"text":"'
TEXT_ONLY = ((b'"}', None),)
TEXT_THEN_SEQUENCE = ((b'","n":', None), (b"}", (NUMBER,)))


def event(text: bytes, number: int | None = None) -> bytes:
    if number is None:
        return PREFIX + text + b'"}\n\n'
    return PREFIX + text + b'","n":' + str(number).encode() + b"}\n\n"


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ((), ValueError),  # no value
        (((b'"}', (FREE,)),), ValueError),  # no text
        (((b'",', None), (b'"}', None)), ValueError),  # two texts
        (((b'",', None), (b"}", (3,))), ValueError),  # no such kind
        (((b'",', None), (b"}", (FREE, b'"'))), ValueError),  # a spec ends with a literal
        (((b'",', None), (b"}", (FREE, "str", NUMBER))), TypeError),  # a literal not bytes
        (((b'",', None), (b"}", [FREE])), ValueError),  # a spec not a tuple
        ((("str", None),), TypeError),  # following bytes not bytes
        (((b'"}',),), TypeError),  # a value without its spec
        (([b'"}', None],), TypeError),  # a value not a tuple
        (tuple((b",", None if i == 0 else (NUMBER,)) for i in range(9)), ValueError),
    ],
)
def test_a_reader_is_made_only_from_a_template_it_can_read(values: Any, error: type):
    with pytest.raises(error):
        RunReader(values)


def test_a_reader_reads_only_bytes_and_only_once_made():
    reader = RunReader(TEXT_ONLY)
    for data, prefix in [(bytearray(event(b"a")), PREFIX), (event(b"a"), "prefix"), ("x", b"")]:
        with pytest.raises(TypeError):
            reader.read(data, prefix)
    with pytest.raises(TypeError):
        reader.read(event(b"a"))  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        RunReader.__new__(RunReader).read(event(b"a"), PREFIX)
    with pytest.raises(TypeError):
        reader.__init__(TEXT_ONLY)  # made once: its values never change under a run
    with pytest.raises(TypeError):
        RunReader(values=TEXT_ONLY)


def test_a_run_of_any_length_comes_out_whole_and_stops_at_what_is_not_its_own():
    texts = [b'"w%d"' % i for i in range(1000)]
    events = [event(text[1:-1], i) for i, text in enumerate(texts)]
    other = b'data: {"type":"other"}\n\n'
    reader = RunReader(TEXT_THEN_SEQUENCE)
    run = b"".join(events)
    assert reader.read(run + other, PREFIX) == (texts, 1000, len(run), False)
    cut = run[:-3]  # the last event is not whole
    assert reader.read(cut, PREFIX) == (texts[:-1], 999, len(run) - len(events[-1]), False)


TEXT = TEXT_ONLY
NUMBERED = TEXT_THEN_SEQUENCE


@pytest.mark.parametrize(
    ("values", "run", "read"),
    [
        (TEXT, event(b"") + event(b""), None),  # empty texts make no event: nothing to write
        (TEXT, event(b"a\x01"), None),  # a raw control character
        (TEXT, event(b"\xc3"), None),  # bad UTF-8
        (TEXT, event(b"a") + event(b"\x01"), None),  # one event that fails fails the run
        (NUMBERED, event(b"a", 1).replace(b":1}", b":01}"), None),  # not as JSON writes it
        (NUMBERED, event(b"a", 1).replace(b":1}", b":-1}"), None),
        (NUMBERED, event(b"a", 1).replace(b":1}", b":}"), None),
        (NUMBERED, event(b"a", 10), ([b'"a"'], 1, len(event(b"a", 10)), False)),
        (TEXT, event(b"\xc3\xa9") + event(b""), ([b'"\xc3\xa9"'], 2, 2 * len(PREFIX) + 10, False)),
        (TEXT, event(b'a\\"b'), ([b'"a\\"b"'], 1, len(event(b'a\\"b')), True)),
        (TEXT, event(b"a")[:-1], None),  # no whole event
    ],
)
def test_a_run_reads_only_what_its_events_would_read_whole(values: Any, run: bytes, read: Any):
    assert RunReader(values).read(run, PREFIX) == read


def test_reading_runs_keeps_no_memory():
    """Every object a run makes is the caller's or freed: a leak of one text or list per run
    grows by megabytes over these runs."""
    reader = RunReader(TEXT_THEN_SEQUENCE)
    many = b"".join(event(b"word", i) for i in range(40))  # past the first texts' room
    failing = many + event(b"bad\x01", 41)
    tracemalloc.start()
    try:
        for data in (many, failing):
            reader.read(data, PREFIX)
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20_000):
            reader.read(many, PREFIX)
            reader.read(failing, PREFIX)
            reader.read(many[:100], PREFIX)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 << 10


def test_the_compiled_reader_is_built_from_the_source_in_the_tree():
    source = Path(__file__).parents[2] / "sidecar/translation/_text_runs.c"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    assert digest == _text_runs.SOURCE_SHA256, "built from an older source: run scripts/setup.sh"
