"""Agent identity: the per-agent token, checked in constant time against the build's hashes."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from ..manifest import AgentBuild, Build
from ..model.errors import ApiError


class AuthError(ApiError):
    """401 when no usable token was presented, 403 when it matches no agent."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, "invalid_token" if status == 403 else "missing_token", message)


class TokenVerifier:
    """Holds every agent's token digest; a check always compares against all of them."""

    def __init__(self, build: Build) -> None:
        self._digests = [
            (bytes.fromhex(agent.agent.token_sha256), agent) for agent in build.agents.values()
        ]

    def authenticate(self, headers: Mapping[str, str]) -> AgentBuild:
        token = presented_token(headers)
        digest = hashlib.sha256(token.encode()).digest()
        match: AgentBuild | None = None
        # No early exit: the time taken must not depend on which agent (if any) matched.
        for expected, agent in self._digests:
            if hmac.compare_digest(digest, expected):
                match = agent
        if match is None:
            raise AuthError(403, "the presented token does not belong to any agent of this pod")
        return match


def presented_token(headers: Mapping[str, str]) -> str:
    """The token from ``Authorization: Bearer`` or ``x-api-key``; 401 if absent or malformed
    (tokens are printable ASCII: a header that was not UTF-8 arrives with surrogates)."""
    authorization = headers.get("Authorization")
    if authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not _well_formed(token):
            raise AuthError(401, "malformed Authorization header: expected 'Bearer <token>'")
        return token
    api_key = headers.get("x-api-key")
    if api_key is not None:
        api_key = api_key.strip()
        if not _well_formed(api_key):
            raise AuthError(401, "malformed x-api-key header")
        return api_key
    raise AuthError(401, "missing agent token: send 'Authorization: Bearer <token>' or 'x-api-key'")


def _well_formed(token: str) -> bool:
    return bool(token) and token.isascii() and token.isprintable() and " " not in token
