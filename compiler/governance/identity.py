"""The pod's identity providers resolved for the sidecar (SPEC §21): ``x-claw.identity`` (agents'
JWTs) and ``x-claw.end-users`` (end users' tokens), each with its key set's URL or the key set
itself, read from the pod's ``jwks-file`` and checked here (public keys only: a symmetric key
in a key set would let whoever reads it sign tokens).

The end-user header must not be one the sidecar reads or forwards for another purpose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...sidecar.manifest import EndUserLimits, EndUsers, TokenIssuer
from ..pod_file.confined_files import ConfinementError, read_limited, resolve_confined
from ..pod_file.governance_spec import parse_rate
from ..pod_file.identity_spec import IssuerSpec
from ..pod_file.reader import PodReader, Where
from ..pod_file.spec import PodClaw

SIGNING_KEY_TYPES = frozenset({"RSA", "EC", "OKP"})
# Headers the sidecar reads as the agent's token or forwards to a provider.
_TAKEN_HEADERS = frozenset(
    {
        "authorization",
        "x-api-key",
        "openai-beta",
        "anthropic-version",
        "anthropic-beta",
        "idempotency-key",
        "traceparent",
        "tracestate",
        "mcp-session-id",
        "mcp-protocol-version",
    }
)


def resolve_identity(
    reader: PodReader, claw: PodClaw, root: Path
) -> tuple[TokenIssuer | None, EndUsers | None]:
    """The manifest's ``identity`` and ``end_users``; raises ``CompileError`` naming the field."""
    identity = None
    if claw.identity is not None:
        where: Where = ("x-claw", "identity")
        identity = TokenIssuer(
            claim=claw.identity.agent_claim, **_issuer(reader, claw.identity, root, where)
        )
    end_users = None
    if claw.end_users is not None:
        where = ("x-claw", "end-users")
        header = claw.end_users.header.lower()
        if header in _TAKEN_HEADERS:
            raise reader.fail(
                f"header {header!r} is the agent's token or a header the sidecar forwards; "
                "name another (default x-end-user-token)",
                (*where, "header"),
            )
        end_users = EndUsers(
            header=header,
            claim=claw.end_users.user_claim,
            **_issuer(reader, claw.end_users, root, where),
        )
    return identity, end_users


def resolve_end_user_limits(reader: PodReader, claw: PodClaw) -> EndUserLimits | None:
    spec = claw.end_user_limits
    if spec is None:
        return None
    if claw.end_users is None:
        raise reader.fail(
            "end-user-limits needs x-claw.end-users (the header and issuer of the end user's "
            "token): without it no request has an end user to count",
            ("x-claw", "end-user-limits"),
        )
    return EndUserLimits(
        tokens_per_day=spec.tokens_per_day,
        usd_per_day=spec.usd_per_day,
        requests=parse_rate(spec.requests) if spec.requests is not None else None,
    )


def _issuer(reader: PodReader, spec: IssuerSpec, root: Path, where: Where) -> dict[str, Any]:
    fields: dict[str, Any] = {"issuer": spec.issuer, "audience": spec.audience}
    if spec.jwks_refresh_ms is not None:
        fields["jwks_refresh_ms"] = spec.jwks_refresh_ms
    if spec.jwks_url is not None:
        fields["jwks_url"] = spec.jwks_url
    else:
        fields["jwks"] = _key_set(reader, str(spec.jwks_file), root, (*where, "jwks-file"))
    return fields


def _key_set(reader: PodReader, named: str, root: Path, where: Where) -> dict[str, Any]:
    try:
        text = read_limited(resolve_confined(root, reader.directory, named))
        document = json.loads(text)
    except ConfinementError as exc:
        raise reader.fail(f"jwks-file {named!r}: {exc}", where) from None
    except ValueError:
        raise reader.fail(f"jwks-file {named!r} is not JSON", where) from None
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list) or not keys:
        raise reader.fail(f"jwks-file {named!r} is not a JWKS (an object with 'keys')", where)
    for i, key in enumerate(keys):
        kty = key.get("kty") if isinstance(key, dict) else None
        if kty not in SIGNING_KEY_TYPES:
            raise reader.fail(
                f"jwks-file {named!r} key {i}: kty {kty!r} is not a public signing key "
                f"({', '.join(sorted(SIGNING_KEY_TYPES))}); a symmetric key must never be "
                "published",
                where,
            )
        if "d" in key:
            raise reader.fail(
                f"jwks-file {named!r} key {i} holds a private key ('d'): publish public keys only",
                where,
            )
    return {"keys": keys}
