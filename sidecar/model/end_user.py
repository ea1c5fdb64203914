"""The person an agent works for, once the token that names them has been verified (SPEC §21).

Verified at the door (``x-claw.end-users``); read by the audit and per-end-user limits (the
subject) and by RFC 8693 token exchange (the token, as the exchange's subject token)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

AuthKind = Literal["jwt", "token"]
"""How an agent proved who it is, in a pod with ``identity``: a JWT or its static token."""


@dataclass(frozen=True, slots=True)
class EndUser:
    subject: str
    """The claim the pod names (``user-claim``, default ``sub``): who the audit and limits see."""
    issuer: str
    expires_at: float
    """The token's ``exp`` (Unix seconds): nothing done for this user outlives it."""
    token: str = field(repr=False)
    """The verified token itself, kept only to exchange it for a service's token; a credential:
    never logged, audited, traced or answered."""


def owner_of(agent_id: str, end_user: EndUser | None) -> str:
    """Whose remembered state a request may use (SPEC §21): hidden rounds, retries, stored
    provider objects. The agent's, or, for an end user, the agent's for that end user alone:
    one end user never continues, resumes or is shown another's, even through the same agent."""
    return agent_id if end_user is None else f"{agent_id}\x00end user\x00{end_user.subject}"


def agent_of(owner: str) -> str:
    """The agent part of an ``owner_of`` (agent ids never hold a NUL)."""
    return owner.partition("\x00")[0]


Caller = tuple[EndUser | None, AuthKind | None]
"""Whom a request is for and how its agent proved who it is (the audit's ``end_user``, ``auth``)."""
