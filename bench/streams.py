"""Stream translation's own CPU per streamed answer, in-process: the same on any load.

    .venv/bin/python -m bench.streams                 # six directions, three ways of cutting
    .venv/bin/python -m bench.streams --streams 2000

bench.ab measures whole requests, but a stream's CPU there moves with how its pieces arrive:
a sidecar slower per piece reads larger pieces, fewer of them, and spends less in the kernel
(bench.ab reads ±0.05 ms run to run on the same code, more than what is measured here). Here
the bench's 200-event answers (``bench/upstream.py``) are cut into pieces the same way for
both sides, and each side's work on them is timed in this process (``time.process_time``,
best of five):

- pass-through: what ``server/passthrough.py`` does with each piece of the caller's own
  protocol (usage, the event count, stored ids, the end marker, the key redactor);
- translated: ``StreamTranslator.feed`` on each piece of the provider's stream, its usage
  read from the events it parses, as ``server/translated_stream.py`` does.

Pieces: ``event``, one event a piece (a model streaming at its own pace); ``cut``, five events
a piece, each cut 30 bytes into the next event (the 0.6-4 KiB pieces a busy sidecar reads);
``whole``, the answer in one piece. The sockets, the HTTP framing and the caller's writes are
not in these figures: they are bench.ab's.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable

from bench import upstream
from clawpod.sidecar.codecs import CODECS
from clawpod.sidecar.codecs.usage import StreamUsage
from clawpod.sidecar.model.redaction import Redactor, StreamRedactor
from clawpod.sidecar.state.stored_objects import StreamedIds
from clawpod.sidecar.translation.streams import stream_translator

PROTOCOLS = ("chat", "messages", "responses")
CODEC = {codec.name: codec for codec in CODECS}
REDACTOR = Redactor([b"sk-bench-provider-key-0123456789"])
EVENTS = {
    "chat": upstream.openai_stream("gpt-bench", True),
    "messages": upstream.anthropic_stream("claude-bench"),
    "responses": upstream.responses_stream("gpt-bench"),
}
CUT_EVENTS = 5
CUT_INTO = 30


def pieces(protocol: str, way: str) -> list[bytes]:
    """The protocol's bench answer cut ``way`` (``event``, ``cut`` or ``whole``)."""
    events = EVENTS[protocol]
    stream = b"".join(events)
    if way == "event":
        return list(events)
    if way == "whole":
        return [stream]
    ends, at = [], 0
    for index, event in enumerate(events, 1):
        at += len(event)
        if index % CUT_EVENTS == 0:
            ends.append(min(at + CUT_INTO, len(stream)))
    bounds = [0, *ends, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def pass_through(protocol: str, stream: list[bytes]) -> None:
    codec = CODEC[protocol]
    usage = StreamUsage(codec)
    stored = StreamedIds(codec) if codec.stores_objects else None
    end = codec.end_watch()
    redactor = StreamRedactor(REDACTOR)
    for piece in stream:
        usage.feed(piece)
        usage.events += piece.count(b"data:")
        if stored is not None:
            stored.feed(piece)
        end.feed(piece)
        redactor.feed(piece)
    redactor.flush()


def translated(target: str, caller: str, stream: list[bytes]) -> None:
    usage = StreamUsage(CODEC[target])
    translator = stream_translator(
        target,
        CODEC[caller],
        provider="bench",
        model="bench",
        include_usage=True,
        watch=usage.read,
        redact=REDACTOR.text,
    )
    for piece in stream:
        translator.feed(piece)
    translator.finish()


def microseconds(run: Callable[[], None], streams: int) -> float:
    """CPU microseconds per stream, best of five rounds of ``streams``."""
    for _ in range(min(streams, 50)):
        run()
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(streams):
            run()
        best = min(best, time.process_time() - start)
    return best / streams * 1e6


def table(streams: int, ways: tuple[str, ...] = ("event", "cut", "whole")) -> str:
    lines = [
        "| provider -> caller | " + " | ".join(f"{way}: over pass-through" for way in ways) + " |",
        "|---|" + "---|" * len(ways),
    ]
    base = {}
    for caller in PROTOCOLS:
        for way in ways:
            cut = pieces(caller, way)
            base[caller, way] = microseconds(lambda c=caller, p=cut: pass_through(c, p), streams)
    for caller in PROTOCOLS:
        for target in PROTOCOLS:
            if target == caller:
                continue
            cells = []
            for way in ways:
                cut = pieces(target, way)
                spent = microseconds(lambda t=target, c=caller, p=cut: translated(t, c, p), streams)
                cells.append(f"{spent:.0f} us, {spent - base[caller, way]:+.0f}")
            lines.append(f"| {target} -> {caller} | " + " | ".join(cells) + " |")
    passes = ", ".join(
        f"{caller} " + "/".join(f"{base[caller, way]:.0f}" for way in ways) for caller in PROTOCOLS
    )
    return "\n".join([*lines, "", f"pass-through us per stream ({'/'.join(ways)}): {passes}"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=500, help="streams per timed round")
    print(table(parser.parse_args().streams))


if __name__ == "__main__":
    main()
