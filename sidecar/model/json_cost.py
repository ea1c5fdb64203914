"""What a JSON text may cost once parsed, bounded before it is parsed (issue 30): its size is
bounded by the body limit, but each parsed item costs an object (an empty dict 64 bytes, a
string ~56, a float 32), so 31 MB of tiny messages became +350 MB and seconds of event loop.

The bound counts characters in C (``bytes.count``), never items in Python, one slice at a
time so a caller can give its event loop away in between. It is an upper bound: punctuation
inside strings counts too, so prose and base64 pass at any size, dense code or CSV text of
many megabytes may not.
"""

from __future__ import annotations

from collections.abc import Iterator

# Bytes a parsed item may take at most, by the character that announces it (CPython 3.11,
# 64-bit): '{' an empty dict, ':' a member's share of its dict, '[' an empty list, a string
# (two '"') its object, ',' the pointer and a float it may add. The shortest body of each kind
# ("[{},{}", '{"a":1', '["",""', "[1.5,") costs less parsed than these sum to.
_OBJECT_BYTES = 64
_MEMBER_BYTES = 48
_LIST_BYTES = 56
_STRING_BYTES = 56
_COMMA_BYTES = 32
# Texts below this share of the limit cannot hold a limit's worth of items: not counted.
COUNT_FROM_SHARE = 32
SLICE = 1024 * 1024  # bytes counted in one step


def parsed_cost_bound(raw: bytes | bytearray, start: int = 0, end: int | None = None) -> int:
    """An upper bound, in bytes, of the memory the items of JSON text ``raw[start:end]`` take
    parsed (a quote escaped across ``end`` counts as two halves: more, never less)."""
    strings = (raw.count(b'"', start, end) - raw.count(b'\\"', start, end)) // 2
    return (
        _OBJECT_BYTES * raw.count(b"{", start, end)
        + _MEMBER_BYTES * raw.count(b":", start, end)
        + _LIST_BYTES * raw.count(b"[", start, end)
        + _STRING_BYTES * strings
        + _COMMA_BYTES * raw.count(b",", start, end)
    )


def costs_over(raw: bytes | bytearray, limit: int) -> Iterator[bool]:
    """Count ``raw`` a slice per step: each step yields whether its items, parsed, could take
    more than ``limit`` bytes so far (and the count stops at the first True)."""
    if len(raw) < limit // COUNT_FROM_SHARE:
        return
    cost = 0
    for start in range(0, len(raw), SLICE):
        cost += parsed_cost_bound(raw, start, start + SLICE)
        yield cost > limit
        if cost > limit:
            return
