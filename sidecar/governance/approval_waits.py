"""Calls waiting for an operator's decision on an approval (SPEC §9.3). The approvals
themselves are kept by ``state/approvals.py``; the gate decides which calls need one."""

from __future__ import annotations

import asyncio
import contextlib

from ..state.approvals import Approval, ApprovalStore


class ApprovalWaits:
    """Calls waiting for the decision on an approval of ``store``; woken when it settles."""

    def __init__(self, store: ApprovalStore) -> None:
        self._store = store
        self._decided: dict[str, asyncio.Event] = {}
        self._stopping = False
        store.on_settled = self._wake

    def _wake(self, approval_id: str) -> None:
        event = self._decided.pop(approval_id, None)
        if event is not None:
            event.set()

    async def wait(self, approval_id: str) -> Approval | None:
        """Wait until the approval is decided or expires; None when the sidecar is stopping
        (the approval stays as it is on disk)."""
        store = self._store
        while not self._stopping:
            approval = store.get(approval_id)
            if approval is None or approval.status != "pending":
                return approval
            event = self._decided.setdefault(approval_id, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), max(0.0, approval.expires - store.clock()))
        return None

    def stop(self) -> None:
        """Release every waiter: a sidecar shutting down must not wait for operators."""
        self._stopping = True
        for event in self._decided.values():
            event.set()
        self._decided.clear()
