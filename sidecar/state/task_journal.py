"""Where native MCP tasks live on disk (SPEC §22): the journal log of :mod:`.journal_log`, in
its own directory (``<state>/tasks/``), one journal per task.

A task's records: ``created`` (whose call, in which protocol version, the call's name and
arguments, its time to live), ``sent`` (the call was cleared and is about to leave: from then
on it is never sent again, §8.2), ``status`` (waiting for an approval, or working again) and
``finished`` (its result or error). Each is synced before the sidecar acts on it: a task is
answered to its client only once its ``created`` record is durable, a call leaves only once
its ``sent`` record is. A task that goes (expired, evicted for room) is dropped from the log
with its records blanked, so disk holds no more tasks than memory does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..model.canonical import digest
from .journal_log import JournalLog, Key, line

DIRECTORY = "tasks"


class TaskJournal:
    def __init__(
        self, state_dir: Path, *, max_age_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        """``max_age_s``: how long any task is kept; a restart leaves older ones out."""
        self.log = JournalLog(Path(state_dir) / DIRECTORY, window_s=max_age_s, clock=clock)
        self._clock = clock
        self._folders: dict[str, str] = {}

    def key(self, agent: str, task_id: str) -> Key:
        folder = self._folders.get(agent)
        if folder is None:
            folder = self._folders[agent] = digest("task-agent", agent)[:32]
        return (folder, task_id)

    async def recover(self) -> list[list[dict[str, Any]]]:
        """Every kept task's records, in the order written (before the first request)."""
        await self.log.recovered()
        return await asyncio.to_thread(self._read_all)

    def _read_all(self) -> list[list[dict[str, Any]]]:
        found = []
        for key, journal in list(self.log.journals.items()):
            records = self.log.read(key, sorted(journal.spans))
            if records:
                found.append(records)
        return found

    def write(self, agent: str, task_id: str, record: dict[str, Any]) -> asyncio.Future[None]:
        """Append one record of a task: done once it is synced (OSError if it could not be)."""
        key = self.key(agent, task_id)
        self.log.add(key)
        return self.log.append(key, line(key, self._clock(), record))

    def drop(self, agent: str, task_id: str) -> None:
        """Forget a task: its records are blanked, an ``end`` line says so."""
        self.log.drop(self.key(agent, task_id))

    async def prune(self) -> None:
        """Delete the segments no kept task has records in any more."""
        unneeded = self.log.prune(())
        if unneeded:
            await asyncio.to_thread(self.log.delete_segments, unneeded)

    def close(self) -> None:
        self.log.close()
