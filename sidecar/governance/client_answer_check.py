"""Approvals the agent's own user answers in the client's protocol (SPEC §16).

They live in the one approval store (``state/approvals.py``) with ``approver: client``: bound,
like an operator's, to the agent, the tool, the digest of the arguments and the build, and
usable once before they expire. An answer runs the call only if it names a pending client
approval of exactly this call; anything else (a forged or reused id, another agent's, another
build's, other arguments, an expired one, an operator's) is refused with an error result, not
executed, and audited in the asking agent's chain.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..audit.log import AuditLog
from ..manifest import Approvals
from ..model.client_approval import (
    ClientAnswer,
    ClientApproval,
    approval_requested,
)
from ..model.conversation import CheckedCall, ToolOutcome, refused
from ..observability.metrics import Metrics
from ..state.approvals import (
    Approval,
    ApprovalStore,
    open_approval,
)
from .policy import Decision

log = logging.getLogger("sidecar.approvals")

APPROVAL_INVALID = "approval_invalid"
WHO = "client"
Record = Callable[[Approval, str, str | None, str], Awaitable[None]]


def asks_client(decision: Decision) -> bool:
    """A confirm rule that names the client as its approver held the call."""
    return decision.effect == "confirm" and decision.approver == "client"


class ClientApprovals:
    def __init__(
        self,
        store: ApprovalStore,
        settings: Approvals,
        *,
        manifest_digest: str,
        audit: AuditLog,
        metrics: Metrics,
        record: Record,
    ) -> None:
        """``record``: audits and counts a decision, as the operator's are."""
        self.store = store
        self._record_decision = record
        self.settings = settings
        self.manifest_digest = manifest_digest
        self._audit = audit
        self._metrics = metrics

    async def settle(
        self, agent: str, call: CheckedCall, client: ClientApproval, held_by: Decision
    ) -> ToolOutcome | None:
        """None when the client approved exactly this call; else what the caller gets: the
        request for an approval (no answer yet) or the refusal the model sees."""
        if client.answer is None:
            return self._ask(agent, call, client, held_by)
        return await self._answered(agent, call, client.call_id, client.answer)

    def _ask(
        self, agent: str, call: CheckedCall, client: ClientApproval, held_by: Decision
    ) -> ToolOutcome:
        tool = call.tool
        approval = open_approval(
            self.store,
            self.settings,
            agent,
            call,
            self.manifest_digest,
            rule=held_by.reason,
            approver="client",
            call_id=client.call_id,
        )
        if isinstance(approval, ToolOutcome):
            return approval
        log.info("client approval %s asked for %s of agent %s", approval.id, tool.name, agent)
        self._metrics.approvals.labels(event="created").inc()
        return approval_requested(approval.id)

    async def _answered(
        self, agent: str, call: CheckedCall, call_id: str | None, answer: ClientAnswer
    ) -> ToolOutcome | None:
        approval = self.store.get(answer.approval_id)
        problem = self._mismatch(approval, agent, call, call_id)
        if problem is not None or approval is None:
            await self._refuse(agent, call, answer, problem or "unknown")
            return refused(
                APPROVAL_INVALID,
                f"the approval answer {answer.approval_id!r} was refused ({problem}); "
                "the call was not executed",
            )
        if approval.status == "expired":
            await self._record_decision(approval, "expired", None, WHO)
            return refused("approval_expired", f"approval {approval.id} expired before the answer")
        decision = "approve" if answer.approve else "deny"
        decided = self.store.decide(approval.id, decision, answer.reason, WHO, approver="client")
        decision_made = "approved" if answer.approve else "denied"
        await self._record_decision(decided, decision_made, answer.reason, WHO)
        if not answer.approve:
            because = f": {answer.reason}" if answer.reason else ""
            return refused("approval_denied", f"the call was rejected by the user{because}")
        if not self.store.use(approval.id):  # expired between the two steps
            return refused("approval_expired", f"approval {approval.id} expired before the answer")
        return None

    def _mismatch(
        self,
        approval: Approval | None,
        agent: str,
        call: CheckedCall,
        call_id: str | None,
    ) -> str | None:
        """Why this answer cannot approve this call; None when it names a pending (or just
        expired) client approval of exactly it."""
        if approval is None:
            return "no such approval"
        if approval.agent != agent:
            return "no such approval"  # another agent's: its existence is not confirmed
        if approval.approver != "client":
            return "it is an operator's approval"
        if approval.manifest_digest != self.manifest_digest:
            return "it was asked by another build"
        if (approval.tool, approval.args_digest) != (call.tool.name, call.args_digest):
            return "it approves another call"
        if approval.call_id != call_id:
            return "it approves another call"
        if approval.status not in ("pending", "expired"):
            return f"it is already {approval.status}"
        return None

    async def _refuse(
        self,
        agent: str,
        call: CheckedCall,
        answer: ClientAnswer,
        problem: str,
    ) -> None:
        log.warning("approval answer of agent %s refused: %s", agent, problem)
        self._metrics.approvals.labels(event="refused").inc()
        await self._append(
            agent,
            {
                "event": "approval_answer_refused",
                "approval": answer.approval_id[:100],
                "tool": call.tool.name,
                "args_digest": call.args_digest,
                "approve": answer.approve,
                "problem": problem,
                "who": WHO,
            },
        )

    async def _append(self, agent: str, record: dict[str, Any]) -> None:
        try:
            await self._audit.append(agent, record)
        except Exception:
            log.exception("audit of a client approval answer of agent %s failed", agent)
