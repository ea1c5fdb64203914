"""Hidden tool rounds remembered per conversation (SPEC 4.2 point 14)."""

from __future__ import annotations

from pathlib import Path


class ContinuityStore:
    def __init__(self, state_dir: Path, max_entries: int = 10000) -> None:
        self.directory = Path(state_dir) / "continuity"
        self.max_entries = max_entries

    async def close(self) -> None:
        return None
