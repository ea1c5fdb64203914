"""``python -m bench.streams``: each way of cutting a stream gives each side the same bytes,
and the table has a row for each of the six directions and each way, with its SPEC §20
verdict (never asserted: timings are the bench's to read)."""

from __future__ import annotations

import pytest

from bench import streams


@pytest.mark.parametrize("protocol", streams.PROTOCOLS)
@pytest.mark.parametrize("way", ["event", "cut", "whole"])
def test_every_way_of_cutting_keeps_the_whole_answer(protocol: str, way: str) -> None:
    cut = streams.pieces(protocol, way)
    assert b"".join(cut) == b"".join(streams.EVENTS[protocol])
    if way == "cut":  # pieces of a few events, each ending inside the next one
        assert all(not piece.endswith(b"\n\n") for piece in cut[:-1])


def test_the_table_has_the_six_directions_each_way_and_the_verdict() -> None:
    cells = streams.measure(streams=1)
    assert set(cells) == {f"pass {c} {w}" for c in streams.PROTOCOLS for w in streams.WAYS} | {
        f"{t}>{c} {w}" for t, c in streams.directions() for w in streams.WAYS
    }
    table = streams.table(cells, cells, "base")
    rows = [line for line in table.splitlines() if line.endswith("met |")]
    assert len(rows) == 6 * len(streams.WAYS), table
    assert all(row.endswith((" met |", " NOT met |")) for row in rows)
    assert all("| 1.00 |" in row for row in rows)  # this over base, the same cells
