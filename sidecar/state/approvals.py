"""Approvals bound to the exact call (SPEC §9.3): the store and its files.

An approval names one call: agent, tool, the digest of its arguments and the digest of the build
that asked. It is approved or denied once by an operator, expires unanswered, and authorises
exactly one execution. Every approval that is not finished lives in
``<state_dir>/approvals/<id>.json`` (written atomically), so a pending one survives a restart and
an approved one can still be used by the client's retry. Calls waiting on a decision are
governance's (``governance/approval_waits.py``); the store tells it when one settles.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ..manifest import DEFAULT_MAX_OPEN_APPROVALS, Approvals, Approver
from ..model.canonical import canonical_json, digest
from ..model.conversation import CheckedCall, ToolOutcome, refused

log = logging.getLogger(__name__)

Status = Literal["pending", "approved", "denied", "expired", "used"]
Decision = Literal["approve", "deny"]
# How long a finished approval stays listed (and refuses a second use by name) in memory.
FINISHED_KEPT = 256
# Arguments as listed and sent to the webhook: a preview past this (canonical JSON bytes); the
# digest names the whole (issue 30: 4 MB arguments were listed and posted whole).
ARGUMENTS_PREVIEW_BYTES = 64 * 1024
# The arguments of a call that waits for an approval, in canonical JSON: it is kept in a file
# and in memory until decided, for each of up to max-open-per-agent approvals (issue 46: 8
# approvals of 4 MB arguments cost 34 MB of disk and 119 MB of memory).
MAX_APPROVAL_ARGUMENTS_BYTES = 256 * 1024
APPROVAL_ARGUMENTS_TOO_LARGE = "approval_arguments_too_large"


class Approval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    agent: str
    tool: str
    arguments: dict[str, Any]
    args_digest: str
    manifest_digest: str
    created: float
    expires: float
    status: Status = "pending"
    reason: str | None = None
    decided_by: str | None = None
    decided_at: float | None = None
    # What an operator needs to judge it (SPEC §15): whose credential the call would use, and
    # what held it (a confirm rule's source and reason, or the pod's approvals.require).
    principal: str | None = None
    rule: str | None = None
    # Who answers it (SPEC §16): the operator, or the agent's user in the client's protocol;
    # a client's approval also names the call it holds (a Responses call id; None over MCP).
    approver: Approver = "operator"
    call_id: str | None = None
    # The verified end user the call is for (SPEC §21): the operator sees whom it acts for,
    # and one end user's approval never clears another's identical call.
    end_user: str | None = None

    def public(self) -> dict[str, Any]:
        """As listed and sent to the webhook: arguments longer than ``ARGUMENTS_PREVIEW_BYTES``
        in canonical JSON become ``arguments_preview`` (their first bytes, as text) and
        ``arguments_bytes``; ``args_digest`` names them whole either way."""
        data = self.model_dump(mode="json", exclude={"arguments"})
        text = canonical_json(self.arguments)
        if len(text) > ARGUMENTS_PREVIEW_BYTES:
            data["arguments_preview"] = text[:ARGUMENTS_PREVIEW_BYTES].decode("utf-8", "ignore")
            data["arguments_bytes"] = len(text)
        else:
            data["arguments"] = self.arguments
        return data


class ApprovalError(Exception):
    """No such approval, or it was already decided."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def args_digest(arguments: dict[str, Any]) -> str:
    return digest(canonical_json(arguments).decode())


def open_approval(
    store: ApprovalStore,
    settings: Approvals,
    agent: str,
    call: CheckedCall,
    manifest_digest: str,
    **fields: Any,
) -> Approval | ToolOutcome:
    """A new pending approval of this call (``fields``: ``rule``, ``reason``, ``approver``,
    ``call_id``, ``end_user``), or the refusal the model sees: arguments too large to keep, or
    the agent has its limit open. Nothing is stored for a refused one."""
    tool = call.tool
    if len(call.canonical) > MAX_APPROVAL_ARGUMENTS_BYTES:
        return refused(
            APPROVAL_ARGUMENTS_TOO_LARGE,
            f"{tool.presented} needs an approval, and its arguments are {len(call.canonical)} "
            f"bytes as JSON: a call that waits for an approval may carry at most "
            f"{MAX_APPROVAL_ARGUMENTS_BYTES}. The call was not executed; send less per call",
        )
    limit = settings.max_open_per_agent or DEFAULT_MAX_OPEN_APPROVALS
    if store.open_count(agent) >= limit:
        return refused(
            "approval_limit",
            f"this agent already has {limit} approvals waiting for a decision; "
            "call again once some are decided",
        )
    return store.create(
        agent,
        tool.name,
        dict(call.arguments),
        manifest_digest,
        settings.timeout_ms / 1000,
        principal=tool.execution.auth.principal,
        **fields,
    )


def _nobody_waits(approval_id: str) -> None:
    """The settle hook of a store no waiter watches."""


class ApprovalStore:
    def __init__(self, state_dir: Path, clock: Callable[[], float] = time.time) -> None:
        self._dir = Path(state_dir) / "approvals"
        self.clock = clock
        self._open: dict[str, Approval] = {}
        self._finished: dict[str, Approval] = {}
        self.on_settled: Callable[[str], None] = _nobody_waits
        """Called with an approval's id once it is decided or expired."""
        self._load()

    # -- files ------------------------------------------------------------------------------

    def _load(self) -> None:
        if not self._dir.is_dir():
            return
        for path in sorted(self._dir.glob("*.json")):
            try:
                approval = Approval.model_validate_json(path.read_bytes())
            except (OSError, ValidationError) as exc:
                log.warning("approval file %s is unreadable and is ignored: %s", path.name, exc)
                continue
            self._open[approval.id] = approval

    def _save(self, approval: Approval) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        path = self._dir / f"{approval.id}.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(approval.model_dump_json())
        os.replace(temporary, path)

    def _finish(self, approval: Approval, status: Status) -> Approval:
        finished = approval.model_copy(update={"status": status})
        self._open.pop(approval.id, None)
        self._finished[approval.id] = finished
        if len(self._finished) > FINISHED_KEPT:
            self._finished.pop(next(iter(self._finished)))
        (self._dir / f"{approval.id}.json").unlink(missing_ok=True)
        return finished

    # -- queries ----------------------------------------------------------------------------

    def get(self, approval_id: str) -> Approval | None:
        self._expire_due()
        return self._open.get(approval_id) or self._finished.get(approval_id)

    def listing(self, include_finished: bool = False) -> list[Approval]:
        self._expire_due()
        found = list(self._open.values())
        if include_finished:
            found += self._finished.values()
        return sorted(found, key=lambda a: a.created)

    def open_count(self, agent: str) -> int:
        """The agent's approvals still open (pending, or approved and not yet used)."""
        self._expire_due()
        return sum(1 for approval in self._open.values() if approval.agent == agent)

    def find(
        self,
        agent: str,
        tool: str,
        digest_of_args: str,
        manifest_digest: str,
        end_user: str | None = None,
    ) -> Approval | None:
        """An open (pending or approved, unexpired) operator's approval of exactly this call
        for this end user (a client's approval is answered by its own request id, never
        shared)."""
        self._expire_due()
        wanted = (agent, tool, digest_of_args, manifest_digest, end_user)
        for approval in self._open.values():
            bound = (
                approval.agent,
                approval.tool,
                approval.args_digest,
                approval.manifest_digest,
                approval.end_user,
            )
            if approval.approver == "operator" and bound == wanted:
                return approval
        return None

    # -- changes ----------------------------------------------------------------------------

    def create(
        self,
        agent: str,
        tool: str,
        arguments: dict[str, Any],
        manifest_digest: str,
        timeout_s: float,
        *,
        principal: str | None = None,
        rule: str | None = None,
        reason: str | None = None,
        approver: Approver = "operator",
        call_id: str | None = None,
        end_user: str | None = None,
    ) -> Approval:
        """A pending approval; ``reason`` says why the call waits (``tainted``, SPEC §17)."""
        now = self.clock()
        approval = Approval(
            id="apr_" + secrets.token_hex(12),
            agent=agent,
            tool=tool,
            arguments=arguments,
            args_digest=args_digest(arguments),
            manifest_digest=manifest_digest,
            created=now,
            expires=now + timeout_s,
            principal=principal,
            rule=rule,
            reason=reason,
            approver=approver,
            call_id=call_id,
            end_user=end_user,
        )
        self._save(approval)
        self._open[approval.id] = approval
        return approval

    def decide(
        self,
        approval_id: str,
        decision: Decision,
        reason: str | None,
        who: str,
        approver: Approver = "operator",
    ) -> Approval:
        """Record a decision of ``approver`` (the operator unless said otherwise); raises
        :class:`ApprovalError` if it cannot be."""
        approval = self.get(approval_id)
        if approval is None:
            raise ApprovalError(404, f"no approval {approval_id}")
        if approval.approver != approver:
            raise ApprovalError(
                409, f"approval {approval_id} is for the {approval.approver} to answer"
            )
        if approval.status != "pending":
            raise ApprovalError(409, f"approval {approval_id} is already {approval.status}")
        decided = approval.model_copy(
            update={"reason": reason, "decided_by": who, "decided_at": self.clock()}
        )
        if decision == "approve":
            decided = decided.model_copy(update={"status": "approved"})
            self._save(decided)
            self._open[approval_id] = decided
        else:
            decided = self._finish(decided, "denied")
        self.on_settled(approval_id)
        return decided

    def use(self, approval_id: str) -> bool:
        """Spend an approved approval on its one call; False if it is not approved (any more)."""
        approval = self._open.get(approval_id)
        if approval is None or approval.status != "approved" or self._due(approval):
            return False
        self._finish(approval, "used")
        return True

    def _due(self, approval: Approval) -> bool:
        return approval.expires <= self.clock()

    def _expire_due(self) -> list[Approval]:
        expired = [self._finish(a, "expired") for a in list(self._open.values()) if self._due(a)]
        for approval in expired:
            self.on_settled(approval.id)
        return expired
