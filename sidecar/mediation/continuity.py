"""Hidden tool rounds remembered per conversation (docs/contract.md §4.2 point 14).

The runner only ever sees final answers, so the rounds that led to an answer (assistant
tool-call turns and tool results) are stored under a key derived from the conversation up to
and including that answer. When the conversation comes back, the engine finds them by the same
key and re-inserts them.

Storage is one append-only log under ``<state>/continuity/`` (one JSON line per entry: a single
write per request, no file churn) with an in-memory index of key -> byte range, rebuilt by
scanning the log after a restart. Live entries are bounded in number and bytes (least recently
used evicted; after a restart "recent" means recently written); the log is compacted when dead
entries dominate it.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("sidecar.continuity")

LOG_NAME = "rounds.jsonl"
# Compact when the log is this much larger than its live entries (and not tiny).
COMPACT_RATIO = 3
COMPACT_MIN_BYTES = 1 << 20
# Live entries are bounded in bytes too: rounds carry tool results of up to 16 KiB each.
DEFAULT_MAX_BYTES = 256 << 20


class ContinuityStore:
    def __init__(
        self, state_dir: Path, max_entries: int = 10000, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.directory = Path(state_dir) / "continuity"
        self.path = self.directory / LOG_NAME
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._index: OrderedDict[str, tuple[int, int]] | None = None
        self._fd: int | None = None
        self._size = 0
        self._live_bytes = 0

    def recall(self, keys: list[str]) -> dict[str, list[dict[str, Any]]]:
        index = self._open()
        found: dict[str, list[dict[str, Any]]] = {}
        for key in keys:
            span = index.get(key)
            if span is None:
                continue
            messages = self._read(key, *span)
            if messages is not None:
                found[key] = messages
                index.move_to_end(key)
        return found

    def remember(self, key: str, messages: list[dict[str, Any]]) -> None:
        index = self._open()
        line = orjson.dumps({"key": key, "messages": messages}) + b"\n"
        if key in index:
            self._live_bytes -= index[key][1]
        index[key] = (self._size, len(line))
        index.move_to_end(key)
        self._live_bytes += len(line)
        assert self._fd is not None
        os.write(self._fd, line)
        self._size += len(line)
        self._evict()
        if self._size > COMPACT_MIN_BYTES and self._size > COMPACT_RATIO * self._live_bytes:
            self._compact()

    async def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        self._index = None

    def __len__(self) -> int:
        return len(self._open())

    # --- the log ----------------------------------------------------------------------------

    def _open(self) -> OrderedDict[str, tuple[int, int]]:
        if self._index is not None:
            return self._index
        self.directory.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        self._index = OrderedDict()
        self._size = self._live_bytes = 0
        with open(self.path, "rb") as existing:
            for line in existing:
                self._load_line(line)
        if self._size and not _ends_with_newline(self.path):
            # A torn last line (crash mid-write): later entries start on a fresh line.
            os.write(self._fd, b"\n")
            self._size += 1
        self._evict()
        return self._index

    def _load_line(self, line: bytes) -> None:
        assert self._index is not None
        offset, length = self._size, len(line)
        self._size += length
        try:
            entry = orjson.loads(line)
            key = entry["key"]
        except (ValueError, KeyError, TypeError):
            return  # a torn or foreign line is skipped, not fatal
        if key in self._index:
            self._live_bytes -= self._index.pop(key)[1]
        if entry.get("drop"):
            return
        self._index[key] = (offset, length)
        self._index.move_to_end(key)
        self._live_bytes += length

    def _evict(self) -> None:
        """Drop least recently used entries over the bound; tombstones keep them dropped."""
        assert self._index is not None and self._fd is not None
        tombstones = b""
        while len(self._index) > self.max_entries or (
            len(self._index) > 1 and self._live_bytes > self.max_bytes
        ):
            evicted, (_, length) = self._index.popitem(last=False)
            self._live_bytes -= length
            tombstones += orjson.dumps({"key": evicted, "drop": True}) + b"\n"
        if tombstones:
            os.write(self._fd, tombstones)
            self._size += len(tombstones)

    def _read(self, key: str, offset: int, length: int) -> list[dict[str, Any]] | None:
        assert self._fd is not None
        try:
            entry = orjson.loads(os.pread(self._fd, length, offset))
            if entry["key"] != key:
                raise ValueError("index points at another entry")
            return entry["messages"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("continuity entry %s unreadable: %s", key, exc)
            return None

    def _compact(self) -> None:
        """Rewrite only the live entries (in LRU order) and swap the new log in."""
        assert self._index is not None and self._fd is not None
        temporary = self.path.with_suffix(".compact")
        index: OrderedDict[str, tuple[int, int]] = OrderedDict()
        size = 0
        with open(temporary, "wb") as out:
            for key, (offset, length) in self._index.items():
                out.write(os.pread(self._fd, length, offset))
                index[key] = (size, length)
                size += length
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND, 0o600)
        self._index, self._size, self._live_bytes = index, size, size


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as file:
        file.seek(-1, os.SEEK_END)
        return file.read(1) == b"\n"
