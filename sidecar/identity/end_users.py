"""The end user a request is for (SPEC §21, ``x-claw.end-users``): the token a runner passes in
the pod's header, verified like an agent's JWT, made the request's :class:`EndUser`.

Replay by another agent: a token issued to one of the pod's agents (its ``azp``, else its
``client_id``, names that agent's id) is accepted only from that agent. Any other token (one
that names no party, or the runner's own OAuth client, as every RFC 9068 access token does) is
accepted from any agent of the pod, and the audit record of every request names both the
agent (its log) and the end user (``end_user``). docs/identity.md says so.
"""

from __future__ import annotations

from collections.abc import Container, Mapping

from ..manifest import EndUsers
from ..model.end_user import EndUser
from .jwks import KeySet
from .tokens import JwtVerifier, TokenRejected

_BOUND_TO = ("azp", "client_id")


class EndUserVerifier:
    def __init__(self, config: EndUsers, keys: KeySet, agents: Container[str]) -> None:
        """``agents``: the pod's agent ids, the parties a token can be bound to."""
        self.header = config.header
        self.tokens = JwtVerifier(config, keys)
        self._agents = agents

    async def verify(self, headers: Mapping[str, str], agent_id: str) -> EndUser | None:
        """The end user of a request from ``agent_id``; None without the header. Raises
        ``TokenRejected`` for a header that is present but not a valid token for this agent."""
        value = headers.get(self.header)
        if value is None:
            return None
        token = value.strip()
        scheme, _, rest = token.partition(" ")
        if scheme.lower() == "bearer":
            token = rest.strip()
        if not token or not token.isascii() or not token.isprintable():
            raise TokenRejected("the end user's token is empty or not printable ASCII")
        verified = await self.tokens.verify(token)
        party = next((verified.claims[c] for c in _BOUND_TO if c in verified.claims), None)
        if party != agent_id and party in self._agents:
            raise TokenRejected(
                "the end user's token was issued to another agent of this pod ('azp' or "
                "'client_id')"
            )
        return EndUser(
            subject=verified.subject,
            issuer=self.tokens.issuer.issuer,
            expires_at=float(verified.claims["exp"]),
            token=token,
        )
