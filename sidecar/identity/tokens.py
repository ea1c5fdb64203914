"""A JWT from one identity provider, verified (SPEC §21): the signature against the issuer's
keys (``jwks.py``), with the algorithm pinned to the key's; ``exp`` and ``nbf`` (within
``LEEWAY_S``), ``iss`` and ``aud``; and the claim that names who it is for.

Verification is PyJWT's (2.x, with ``cryptography`` for the signatures): maintained, already
installed with the MCP SDK, and its ``decode`` checks the registered claims in one place. The
sidecar adds what PyJWT leaves to its caller: which key and which algorithm (never the token's
say alone: ``none`` and ``HS*`` are never among a key's algorithms), a bound on the token's
size, and refusals that name the failed check and never echo the token.

A verification costs about 160 µs of CPU (RS256, PyJWT); a runner sends the same token with
every request until it expires, so each verifier remembers the tokens it accepted
(``MAX_REMEMBERED``, the oldest forgotten first) until their ``exp`` (plus the leeway), and
checks one again whenever its issuer's keys changed since.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import jwt

from ..manifest import TokenIssuer
from ..transport.client import HttpClient
from .jwks import KeySet

LEEWAY_S = 30  # clock skew tolerated on exp, nbf and iat
MAX_TOKEN_BYTES = 16 * 1024
MAX_SUBJECT_CHARS = 256
MAX_REMEMBERED = 1024
_REQUIRED_CLAIMS = ["exp", "iss", "aud"]


class TokenRejected(Exception):
    """The token is not valid for this pod; the message names the check (never the token)."""


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    subject: str
    """The pod's chosen claim (``agent-claim``, ``user-claim``)."""
    claims: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Accepted:
    verified: VerifiedToken
    until: float  # Unix seconds: its exp plus the leeway
    generation: int  # of the key set that verified it


class JwtVerifier:
    """One issuer's tokens for one audience."""

    def __init__(self, issuer: TokenIssuer, keys: KeySet) -> None:
        """``keys``: the issuer's key set, shared by every verifier of the same JWKS URL (one
        fetch per interval for them all: ``key_sets``)."""
        self.issuer = issuer
        self.keys = keys
        self._accepted: dict[str, _Accepted] = {}

    async def verify(self, token: str) -> VerifiedToken:
        accepted = self._accepted.get(token)
        if (
            accepted is not None
            and accepted.generation == self.keys.generation
            and time.time() < accepted.until
        ):
            return accepted.verified
        verified = await self._verify(token)
        if len(self._accepted) >= MAX_REMEMBERED:
            del self._accepted[next(iter(self._accepted))]
        until = float(verified.claims["exp"]) + LEEWAY_S
        self._accepted[token] = _Accepted(verified, until, self.keys.generation)
        return verified

    async def _verify(self, token: str) -> VerifiedToken:
        if len(token) > MAX_TOKEN_BYTES:
            raise TokenRejected(f"the token is longer than {MAX_TOKEN_BYTES} bytes")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenRejected("the token is not a well-formed JWT") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if not isinstance(algorithm, str) or (kid is not None and not isinstance(kid, str)):
            raise TokenRejected("the token's header has no valid 'alg' or 'kid'")
        key = await self.keys.key_for(kid)
        if key is None:
            raise TokenRejected("the token is signed with a key the issuer does not publish")
        if algorithm != key.algorithm:
            raise TokenRejected(
                f"the token's algorithm {algorithm[:16]!r} is not its key's ({key.algorithm})"
            )
        claims = self._decode(token, key.key.key, key.algorithm)
        subject = claims.get(self.issuer.claim)
        if not isinstance(subject, str) or not subject or len(subject) > MAX_SUBJECT_CHARS:
            raise TokenRejected(f"the token's {self.issuer.claim!r} claim is missing or invalid")
        if not subject.isprintable():
            raise TokenRejected(f"the token's {self.issuer.claim!r} claim is not printable text")
        return VerifiedToken(subject, claims)

    def _decode(self, token: str, key: Any, algorithm: str) -> dict[str, Any]:
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self.issuer.audience,
                issuer=self.issuer.issuer,
                leeway=LEEWAY_S,
                options={"require": _REQUIRED_CLAIMS, "verify_signature": True},
            )
        except jwt.ExpiredSignatureError:
            raise TokenRejected("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenRejected("the token is not valid yet (nbf)") from None
        except jwt.InvalidAudienceError:
            raise TokenRejected("the token is not for this pod's audience") from None
        except jwt.InvalidIssuerError:
            raise TokenRejected("the token is not from this pod's issuer") from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRejected(f"the token lacks the {exc.claim!r} claim") from None
        except jwt.InvalidSignatureError:
            raise TokenRejected("the token's signature does not verify") from None
        except jwt.PyJWTError:
            raise TokenRejected("the token is not valid") from None


def key_sets(issuers: Iterable[TokenIssuer], client: HttpClient | None) -> dict[int, KeySet]:
    """Each issuer's key set by ``id(issuer)``: one per JWKS URL (the first issuer naming it
    sets its refresh interval), one per key set carried in the build."""
    by_url: dict[str, KeySet] = {}
    sets: dict[int, KeySet] = {}
    for issuer in issuers:
        if issuer.jwks_url is None:
            sets[id(issuer)] = KeySet(document=issuer.jwks)
            continue
        if issuer.jwks_url not in by_url:
            by_url[issuer.jwks_url] = KeySet(
                url=issuer.jwks_url,
                client=client,
                refresh_interval_s=issuer.jwks_refresh_ms / 1000,
            )
        sets[id(issuer)] = by_url[issuer.jwks_url]
    return sets
