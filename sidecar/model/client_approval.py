"""Approvals answered in the client's own protocol (SPEC §16), as every layer sees them.

A call held by a ``confirm`` rule with ``approver: client`` is not run and not waited on: the
gate opens an approval and answers the call with :func:`approval_requested`. The caller turns
that into its protocol's question (a Responses ``mcp_approval_request`` item, an MCP
``elicitation/create`` or ``input_required`` result) and brings the user's answer back as a
:class:`ClientAnswer` with the same call, which the gate checks against the approval.
"""

from __future__ import annotations

from dataclasses import dataclass

from .conversation import ToolOutcome, error_envelope, refused

APPROVAL_REQUESTED = "approval_requested"
APPROVAL_UNANSWERED = "approval_unanswered"
# The label a client sees on the sidecar's approval items (``server_label``).
SERVER_LABEL = "clawpod"


@dataclass(frozen=True, slots=True)
class ClientAnswer:
    """The user's answer to one approval request."""

    approval_id: str
    approve: bool
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ClientApproval:
    """Passed with a call by a caller whose client can answer approvals: the call it is (a
    Responses call id; None over MCP) and, on the way back, the user's answer."""

    call_id: str | None
    answer: ClientAnswer | None = None


def approval_requested(approval_id: str) -> ToolOutcome:
    """The call waits for the client's answer to ``approval_id``; nothing was sent."""
    envelope = error_envelope(
        APPROVAL_REQUESTED, f"approval {approval_id} is asked of the client; not executed yet"
    )
    envelope["error"]["approval"] = approval_id
    return ToolOutcome(envelope, APPROVAL_REQUESTED, None, executed=False, latency_ms=0.0)


def unanswered(approval_id: str) -> ToolOutcome:
    """The client gave no answer to ``approval_id`` (none sent, none in time, the sidecar
    stopping): the call is not run, and the approval expires by itself."""
    return refused(
        APPROVAL_UNANSWERED,
        f"the user did not answer approval {approval_id}; the call was not executed",
    )


def requested_approval(outcome: ToolOutcome) -> str | None:
    """The approval id an outcome asks the client about, if it does."""
    if outcome.error_code != APPROVAL_REQUESTED:
        return None
    return str(outcome.envelope["error"]["approval"])
