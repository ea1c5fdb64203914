"""``x-claw.identity``, ``x-claw.end-users`` and ``x-claw.end-user-limits`` as written (SPEC §21):
the identity provider whose JWTs agents may present instead of their static tokens, the one
whose tokens name the end users, and what each end user may spend per day."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from .governance_spec import parse_rate

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


class EndUserLimitsSpec(_Spec):
    """``end-user-limits``: each end user's daily budget and request rate, across agents."""

    tokens_per_day: Annotated[int, Strict(), Field(gt=0)] | None = Field(
        default=None, alias="tokens-per-day"
    )
    usd_per_day: Annotated[float, Field(gt=0)] | None = Field(default=None, alias="usd-per-day")
    requests: str | None = Field(default=None, description="N/second, N/minute or N/hour")

    @field_validator("requests")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rate(value)
        return value

    @model_validator(mode="after")
    def _some_limit(self) -> EndUserLimitsSpec:
        if self.tokens_per_day is None and self.usd_per_day is None and self.requests is None:
            raise ValueError("set tokens-per-day, usd-per-day, requests or several")
        return self
