"""Content-Encoding bodies (gzip, deflate) decoded no faster than they are read: output is
taken in steps of a bounded size, so a small compressed body cannot expand in memory all at
once (a gzip bomb)."""

from __future__ import annotations

import zlib
from collections import deque

# Window-bits values: 16+ expects a gzip wrapper, 32+ detects gzip or zlib.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 32 + 15}
# Compressed input handed to zlib per step: what zlib leaves unconsumed is copied each step.
_INPUT_STEP = 16 * 1024


class Inflater:
    """Compressed bytes in (:meth:`push`), decoded bytes out on demand (:meth:`pull`)."""

    __slots__ = ("_input", "_more", "_zlib")

    def __init__(self, wbits: int) -> None:
        self._zlib = zlib.decompressobj(wbits)
        self._input: deque[memoryview] = deque()
        self._more = False  # the last pull filled its limit: zlib may hold more output

    @property
    def pending(self) -> bool:
        """Whether a pull can still produce output from what was pushed."""
        return bool(self._input) or self._more

    def push(self, data: bytes) -> None:
        self._input.append(memoryview(data))

    def pull(self, max_length: int) -> bytes:
        """At most ``max_length`` decoded bytes (``b""`` when nothing is pending); raises
        ``zlib.error`` when the input is not valid for the encoding."""
        queue = self._input
        if self._zlib.eof:  # bytes after the end of the compressed stream are ignored
            queue.clear()
            self._more = False
            return b""
        if queue:
            data = queue[0]
            piece = data[:_INPUT_STEP]
            out = self._zlib.decompress(piece, max_length)
            used = len(piece) - len(self._zlib.unconsumed_tail)
            if used >= len(data):
                queue.popleft()
            else:
                queue[0] = data[used:]
        else:
            out = self._zlib.decompress(b"", max_length)
        self._more = len(out) == max_length
        return out


def inflater_for(encoding: str) -> Inflater | None:
    """The decoder for a Content-Encoding value, None for identity; ``ValueError`` for an
    encoding the client cannot decode."""
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return None
    if name not in _WBITS:
        raise ValueError(name)
    return Inflater(_WBITS[name])
