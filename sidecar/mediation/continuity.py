"""Hidden tool rounds remembered per conversation (SPEC 4.2 point 14).

The runner only ever sees final answers, so the rounds that led to an answer (assistant
tool-call turns and tool results) are stored under a key derived from the conversation up to
and including that answer. When the conversation comes back, the engine finds them by the same
key and re-inserts them. One small JSON file per key under ``<state>/continuity/``; the set of
keys is bounded (least recently used evicted) and rebuilt from the directory after a restart.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("sidecar.continuity")

# Decoded entries kept in memory; the rest are read from disk when a conversation returns.
CACHE_ENTRIES = 512


class ContinuityStore:
    def __init__(self, state_dir: Path, max_entries: int = 10000) -> None:
        self.directory = Path(state_dir) / "continuity"
        self.max_entries = max_entries
        self._keys: OrderedDict[str, None] | None = None
        self._cache: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def recall(self, keys: list[str]) -> dict[str, list[dict[str, Any]]]:
        index = self._index()
        found: dict[str, list[dict[str, Any]]] = {}
        for key in keys:
            if key not in index:
                continue
            messages = self._read(key)
            if messages is not None:
                found[key] = messages
                index.move_to_end(key)
        return found

    def remember(self, key: str, messages: list[dict[str, Any]]) -> None:
        index = self._index()
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_bytes(orjson.dumps({"version": 1, "messages": messages}))
        os.replace(temporary, path)
        index[key] = None
        index.move_to_end(key)
        self._cached(key, messages)
        while len(index) > self.max_entries:
            oldest, _ = index.popitem(last=False)
            self._cache.pop(oldest, None)
            self._path(oldest).unlink(missing_ok=True)

    async def close(self) -> None:
        """Entries are written through on ``remember``; nothing is pending."""
        self._cache.clear()

    def __len__(self) -> int:
        return len(self._index())

    def _index(self) -> OrderedDict[str, None]:
        if self._keys is None:
            files = sorted(self.directory.glob("*/*.json"), key=_mtime)
            self._keys = OrderedDict((p.stem, None) for p in files)
        return self._keys

    def _read(self, key: str) -> list[dict[str, Any]] | None:
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        path = self._path(key)
        try:
            messages = orjson.loads(path.read_bytes())["messages"]
            os.utime(path)  # the file's mtime is the LRU order after a restart
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("continuity entry %s unreadable: %s", key, exc)
            return None
        self._cached(key, messages)
        return messages

    def _cached(self, key: str, messages: list[dict[str, Any]]) -> None:
        self._cache[key] = messages
        self._cache.move_to_end(key)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
