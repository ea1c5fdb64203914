"""Stream translation's CPU per event against the caller's own pass-through of the same stream
(SPEC §20), in-process: the same on any load.

    .venv/bin/python -m bench.streams                   # six directions, three ways of cutting
    .venv/bin/python -m bench.streams --base c7f31f3    # and another commit's, in one run
    .venv/bin/python -m bench.streams --streams 2000

bench.ab measures whole requests, but a stream's CPU there moves with how its pieces arrive:
a sidecar slower per piece reads larger pieces, fewer of them, and spends less in the kernel
(bench.ab reads ±0.05 ms run to run on the same code, more than what is measured here). Here
the bench's 200-event answers (``bench/upstream.py``) are cut into pieces the same way for
both sides, and each side's work on them is timed in this process (``time.process_time``,
best of five):

- pass-through: what ``server/llm/passthrough.py`` does with each piece of the caller's own
  protocol (usage and what the model wrote, stored ids, the end marker, the key redactor);
- translated: ``StreamTranslator.feed`` on each piece of the provider's stream, its usage
  read from the events it parses and what the model wrote counted, as
  ``server/translated/translated_stream.py`` does.

Pieces: ``event``, one event a piece (a model streaming at its own pace); ``cut``, five events
a piece, each cut 30 bytes into the next event (the 0.6-4 KiB pieces a busy sidecar reads);
``whole``, the answer in one piece. The sockets, the HTTP framing and the caller's writes are
not in these figures: they are bench.ab's.

``--base COMMIT`` measures that commit's code too: each side runs in a process of its own
(the base's through a ``clawpod`` link to a worktree of it, first on the path, as bench.ab
does), the sides alternating for ``--rounds`` rounds, each cell the best of all its rounds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import upstream
from clawpod.sidecar.codecs import CODECS
from clawpod.sidecar.codecs.usage import StreamUsage
from clawpod.sidecar.model.redaction import Redactor, StreamRedactor
from clawpod.sidecar.state.stored_objects import StreamedIds
from clawpod.sidecar.translation.streams import stream_translator

PROTOCOLS = ("chat", "messages", "responses")
WAYS = ("event", "cut", "whole")
CODEC = {codec.name: codec for codec in CODECS}
REDACTOR = Redactor([b"sk-bench-provider-key-0123456789"])
EVENTS = {
    "chat": upstream.openai_stream("gpt-bench", True),
    "messages": upstream.anthropic_stream("claude-bench"),
    "responses": upstream.responses_stream("gpt-bench"),
}
CUT_EVENTS = 5
CUT_INTO = 30
# SPEC §20: a translated stream's CPU per event, at most this many times the caller's own
# pass-through's per event, and at most this many microseconds.
TIMES_PASS_THROUGH = 2.0
MICROSECONDS_PER_EVENT = 10.0
REPO = Path(__file__).resolve().parent.parent


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
        usage.feed_written(piece)  # what the model wrote, for an estimate (as the relay)
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


def directions() -> list[tuple[str, str]]:
    """(provider, caller) of the six translated directions."""
    return [(t, c) for c in PROTOCOLS for t in PROTOCOLS if t != c]


def measure(streams: int) -> dict[str, float]:
    """CPU microseconds per event of each cell: ``pass CALLER WAY`` (per event of the caller's
    stream) and ``PROVIDER>CALLER WAY`` (per event of the provider's)."""
    cells = {}
    for caller in PROTOCOLS:
        for way in WAYS:
            cut = pieces(caller, way)
            spent = microseconds(lambda c=caller, p=cut: pass_through(c, p), streams)
            cells[f"pass {caller} {way}"] = spent / len(EVENTS[caller])
    for target, caller in directions():
        for way in WAYS:
            cut = pieces(target, way)
            spent = microseconds(lambda t=target, c=caller, p=cut: translated(t, c, p), streams)
            cells[f"{target}>{caller} {way}"] = spent / len(EVENTS[target])
    return cells


def table(this: dict[str, float], base: dict[str, float] | None, label: str) -> str:
    """One row per direction and way: per event, pass-through, translated, their ratio and
    the SPEC §20 verdict; with a base, its translated figure and this/base."""
    head = "| provider -> caller | way | pass-through us/event | translated us/event | x pass |"
    rule = "|---|---|---|---|---|"
    if base is not None:
        head += f" {label} translated us/event | {label} x pass | translated this/{label} |"
        rule += "---|---|---|"
    lines = [head + " SPEC §20 |", rule + "---|"]
    for target, caller in directions():
        for way in WAYS:
            passed, spent = this[f"pass {caller} {way}"], this[f"{target}>{caller} {way}"]
            row = f"| {target} -> {caller} | {way} | {passed:.2f} | {spent:.2f} "
            row += f"| {spent / passed:.2f} |"
            if base is not None:
                was = base[f"{target}>{caller} {way}"]
                row += f" {was:.2f} | {was / base[f'pass {caller} {way}']:.2f} "
                row += f"| {spent / was:.2f} |"
            met = spent <= TIMES_PASS_THROUGH * passed and spent <= MICROSECONDS_PER_EVENT
            lines.append(row + (" met |" if met else " NOT met |"))
    return "\n".join(lines)


def measured_in_process(streams: int, packages: Path | None) -> dict[str, float]:
    """``measure`` in a process of its own, on the code ``packages`` links (else this tree's)."""
    env = dict(os.environ)
    if packages is not None:
        env["PYTHONPATH"] = str(packages)
    done = subprocess.run(
        [sys.executable, "-m", "bench.streams", "--json", "--streams", str(streams)],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def against(base: str, streams: int, rounds: int) -> tuple[dict[str, float], dict[str, float]]:
    """This tree's cells and ``base``'s, the sides alternating, each cell its best round."""
    from bench.ab import build_compiled_modules  # bench.ab starts nothing on import

    best: dict[str, dict[str, float]] = {"base": {}, "this": {}}
    with tempfile.TemporaryDirectory(prefix="clawpod-streams-") as scratch:
        tree = Path(scratch) / "base"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), base],
            check=True,
            capture_output=True,
        )
        try:
            build_compiled_modules(tree, Path(scratch))
            packages = Path(scratch) / "packages"
            packages.mkdir()
            (packages / "clawpod").symlink_to(tree, target_is_directory=True)
            sides = {"base": packages, "this": None}
            for rep in range(rounds):
                for side in ("base", "this") if rep % 2 == 0 else ("this", "base"):
                    for cell, spent in measured_in_process(streams, sides[side]).items():
                        best[side][cell] = min(spent, best[side].get(cell, spent))
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )
    return best["this"], best["base"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=500, help="streams per timed round")
    parser.add_argument("--base", help="git commit (or ref) to measure beside this tree")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side with --base")
    parser.add_argument("--json", action="store_true", help="print the cells as JSON")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.streams)))
    elif args.base:
        this, base = against(args.base, args.streams, args.rounds)
        print(table(this, base, "base"))
        print(f"\nbase = {args.base}; best of {args.rounds} alternating rounds per side")
    else:
        print(table(measure(args.streams), None, ""))


if __name__ == "__main__":
    main()
