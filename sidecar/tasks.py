"""Work that must finish even when whoever awaits it is cancelled: a tool call already sent, a
mediated loop and its audit record, the record of a stream whose client left. One owner holds
all of it, so shutdown drains it in one place."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class ShieldedTasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` as a task of its own, kept until it ends."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work``; cancelling the caller does not cancel it."""
        return await asyncio.shield(self.spawn(work))

    async def drain(self) -> None:
        """Wait until every task (and any task those start) has ended."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))
