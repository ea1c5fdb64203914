"""``x-claw.identity``, ``x-claw.end-users`` and ``x-claw.end-user-limits`` as written (SPEC §21):
the identity provider whose JWTs agents may present instead of their static tokens, the one
whose tokens name the end users, and what each end user may spend per day."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

HEADER_NAME = r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class IssuerSpec(_Spec):
    issuer: str = Field(min_length=1, description="the tokens' 'iss', exactly")
    audience: str = Field(min_length=1, description="the 'aud' the tokens must name")
    jwks_url: str | None = Field(
        default=None,
        alias="jwks-url",
        pattern=r"^https?://[^\s]+$",
        description="where the sidecar fetches the issuer's public keys (cached)",
    )
    jwks_file: str | None = Field(
        default=None,
        alias="jwks-file",
        min_length=1,
        description="a JWKS file inside the pod tree, carried in the build",
    )
    jwks_refresh_ms: Annotated[int, Strict(), Field(ge=1000)] | None = Field(
        default=None,
        alias="jwks-refresh-ms",
        description="at most one fetch of the JWKS URL per this many ms (default 60000)",
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> IssuerSpec:
        if (self.jwks_url is None) == (self.jwks_file is None):
            raise ValueError("set jwks-url (fetched by the sidecar) or jwks-file (one of them)")
        return self


class IdentitySpec(IssuerSpec):
    """``identity``: agents may present a JWT of this issuer instead of their static token."""

    agent_claim: str = Field(
        default="sub", alias="agent-claim", min_length=1, description="the claim naming the agent"
    )


class EndUsersSpec(IssuerSpec):
    """``end-users``: a runner passes its end user's token in ``header``."""

    header: str = Field(
        default="x-end-user-token", pattern=HEADER_NAME, description="the header's name"
    )
    user_claim: str = Field(
        default="sub", alias="user-claim", min_length=1, description="the claim naming the user"
    )
