"""The governance grammar of a pod file (SPEC §9, §24): principals, tool rules, approvals,
budgets, budget groups and the shared store of limits."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from ...sidecar.manifest import (
    ApprovalRequirement,
    Approver,
    OnUnreachable,
    Rate,
    RuleEffect,
    ToolAuth,
)
from .reserved import ENV_NAME

RATE = re.compile(r"^\s*(\d+)\s*/\s*(second|minute|hour)\s*$")
Positive = Annotated[int, Strict(), Field(gt=0)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PrincipalSpec(_Spec):
    """``principals: {<name>: {service, env}}``: a credential of one tool service; or
    ``{service, auth}``: an OAuth identity at it (SPEC §21: client credentials, or token
    exchange on behalf of the end user)."""

    service: str = Field(min_length=1)
    env: str | None = Field(
        default=None, pattern=ENV_NAME.pattern, description="the variable holding the credential"
    )
    auth: ToolAuth | None = Field(
        default=None, description="an OAuth auth (oauth2-client-credentials, token-exchange)"
    )

    @model_validator(mode="after")
    def _one_credential(self) -> PrincipalSpec:
        if (self.env is None) == (self.auth is None):
            raise ValueError("a principal names either env (a credential) or auth (OAuth)")
        if self.auth is not None and not self.auth.oauth:
            raise ValueError(
                "a principal's auth is oauth2-client-credentials or token-exchange; "
                "a static credential is named by env"
            )
        return self

    @property
    def credential_envs(self) -> tuple[str, ...]:
        return (self.env,) if self.env else self.auth.credential_envs if self.auth else ()


class RuleSpec(_Spec):
    """One ``tool-rules`` entry: first match wins, default allow."""

    tool: str = Field(min_length=1, description="canonical name <service>.<tool> or a glob")
    when: str | None = Field(default=None, min_length=1, description="CEL condition")
    effect: RuleEffect = "allow"
    reason: str | None = Field(default=None, max_length=1000)
    rate: str | None = Field(default=None, description="N/second, N/minute or N/hour")
    approver: Approver | None = Field(
        default=None, description="who approves a confirm rule's call: operator (default), client"
    )

    @model_validator(mode="after")
    def _approver_confirms(self) -> RuleSpec:
        if self.approver is not None and self.effect != "confirm":
            raise ValueError(
                f"approver: {self.approver} needs effect: confirm (only a held call is approved)"
            )
        return self

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rate(value)
        return value


def parse_rate(text: str) -> Rate:
    match = RATE.match(text)
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"rate {text!r}: write N/second, N/minute or N/hour with N >= 1")
    return Rate(count=int(match.group(1)), per=match.group(2))  # type: ignore[arg-type]


class ApprovalsSpec(_Spec):
    require: ApprovalRequirement | list[Annotated[str, Field(min_length=1)]] = "none"
    timeout_ms: Positive = Field(default=300000, alias="timeout-ms")
    webhook: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    max_open_per_agent: Positive | None = Field(
        default=None, alias="max-open-per-agent", description="default: 32"
    )


class BudgetSpec(_Spec):
    tokens_per_day: Positive | None = Field(default=None, alias="tokens-per-day")
    usd_per_day: Annotated[float, Field(gt=0)] | None = Field(default=None, alias="usd-per-day")

    @model_validator(mode="after")
    def _some_limit(self) -> BudgetSpec:
        if self.tokens_per_day is None and self.usd_per_day is None:
            raise ValueError("set tokens-per-day, usd-per-day or both")
        return self


class BudgetGroupSpec(_Spec):
    """``budget-groups: {NAME: {agents: [...], tokens-per-day, usd-per-day,
    requests-per-minute, tokens-per-minute}}`` (SPEC §24): the group's daily budgets and its
    rates, shared by its agents (across pods sharing a store)."""

    agents: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, description="agent ids or agent services of this pod"
    )
    tokens_per_day: Positive | None = Field(default=None, alias="tokens-per-day")
    usd_per_day: Annotated[float, Field(gt=0)] | None = Field(default=None, alias="usd-per-day")
    requests_per_minute: Positive | None = Field(default=None, alias="requests-per-minute")
    tokens_per_minute: Positive | None = Field(default=None, alias="tokens-per-minute")

    @model_validator(mode="after")
    def _some_limit(self) -> BudgetGroupSpec:
        limits = (self.tokens_per_day, self.usd_per_day)
        if all(v is None for v in (*limits, self.requests_per_minute, self.tokens_per_minute)):
            raise ValueError(
                "set tokens-per-day, usd-per-day, requests-per-minute and/or tokens-per-minute"
            )
        day, minute = self.tokens_per_day, self.tokens_per_minute
        if day is not None and minute is not None and minute > day:
            raise ValueError(
                f"tokens-per-minute ({minute}) is more than tokens-per-day ({day}): "
                "no minute could spend it"
            )
        return self


DEFAULT_STORE_IMAGE = "valkey/valkey:8.1-alpine"


class StoreServiceSpec(_Spec):
    """The store clawc adds to the pod (compose), reachable by the sidecar alone."""

    image: str = Field(default=DEFAULT_STORE_IMAGE, min_length=1)
    password_env: str = Field(
        alias="password-env",
        pattern=ENV_NAME.pattern,
        description="the variable holding the store's password (a secret the operator sets)",
    )


class SharedLimitsSpec(_Spec):
    """``shared-limits``: rates and budgets counted in Redis/Valkey, shared by every sidecar
    naming the same server (SPEC §24)."""

    url_env: str | None = Field(
        default=None,
        alias="url-env",
        pattern=ENV_NAME.pattern,
        description="the variable holding an external server's redis:// URL (a secret)",
    )
    service: StoreServiceSpec | None = Field(
        default=None, description="a server clawc adds to the pod instead"
    )
    on_unreachable: OnUnreachable = Field(
        default="fail-closed",
        alias="on-unreachable",
        description="fail-closed: refuse what it counts (503); fail-local: count in each "
        "sidecar alone, audited and alarmed",
    )

    @model_validator(mode="after")
    def _one_store(self) -> SharedLimitsSpec:
        if (self.url_env is None) == (self.service is None):
            raise ValueError("set url-env (an external server) or service (one clawc adds)")
        return self
