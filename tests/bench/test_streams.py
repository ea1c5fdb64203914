"""``python -m bench.streams``: each way of cutting a stream gives each side the same bytes,
and the table has a row for each of the six directions."""

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


def test_the_table_has_the_six_directions() -> None:
    table = streams.table(streams=1, ways=("cut",))
    rows = [line for line in table.splitlines() if " us, " in line]
    assert len(rows) == 6, table
    assert "pass-through us per stream (cut): chat " in table
