"""The ``x-claw`` blocks of a pod file (SPEC section 2): the pod's, a tool service's, an agent's,
their tool policy, and each block read from the pod file."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from ...sidecar.manifest import Mode, OnMixed, TaintMode, ToolInjection, ToolPolicy
from ..errors import CompileError
from .documents import validation_error
from .governance_spec import (
    ApprovalsSpec,
    BudgetGroupSpec,
    BudgetSpec,
    PrincipalSpec,
    RuleSpec,
    SharedLimitsSpec,
)
from .grants import Grant, GrantItem
from .identity_spec import EndUserLimitsSpec, EndUsersSpec, IdentitySpec
from .providers import ModelEntry, ProviderSpec, RouteTargetSpec
from .reader import PodReader, Where

AGENT_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
SURFACE = re.compile(r"^service://(.+)$")
# ServiceClaw fields that only an agent may set, with their pod-file spelling.
AGENT_ONLY_FIELDS = {
    "mode": "mode",
    "tools": "tools",
    "tool_policy": "tool-policy",
    "surfaces": "surfaces",
    "tool_rules": "tool-rules",
    "tool_injection": "tool-injection",
}
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
# A host name or IPv4 address, or ``*.`` and a domain for every host under it.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
EGRESS_HOST = rf"^(?:\*\.)?{_LABEL}(?:\.{_LABEL})*$"
EgressAllow = list[Annotated[str, Field(pattern=EGRESS_HOST)]]
TAINT_HELP = (
    "what a request that read untrusted tool output does with destructive and open-world calls: "
    "confirm (hold for approval), withdraw, off; default confirm when a tool is untrusted"
)
TOOL_INJECTION_HELP = (
    "auto: requests that declare no tools and ask for structured output, or that declare no "
    "tools and no tool_choice and ask for a title, summary or compaction of the conversation, "
    "get none injected; always: every request of a mediated agent gets its tools"
)
_Positive = Annotated[int, Strict(), Field(gt=0)]
_DEFAULTS = ToolPolicy()


class PolicySpec(BaseModel):
    """``tool-policy`` / ``tool-policy-defaults``: every value > 0, total >= per tool."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    max_rounds: _Positive = Field(default=_DEFAULTS.max_rounds, alias="max-rounds")
    timeout_per_tool_ms: _Positive = Field(
        default=_DEFAULTS.timeout_per_tool_ms, alias="timeout-per-tool-ms"
    )
    total_timeout_ms: _Positive = Field(
        default=_DEFAULTS.total_timeout_ms, alias="total-timeout-ms"
    )
    max_tool_result_bytes: _Positive = Field(
        default=_DEFAULTS.max_tool_result_bytes, alias="max-tool-result-bytes"
    )

    @model_validator(mode="after")
    def _total_covers_one_tool(self) -> PolicySpec:
        if self.total_timeout_ms < self.timeout_per_tool_ms:
            raise ValueError(
                f"total-timeout-ms ({self.total_timeout_ms}) must be >= "
                f"timeout-per-tool-ms ({self.timeout_per_tool_ms})"
            )
        return self

    def to_policy(self) -> ToolPolicy:
        return ToolPolicy(**self.model_dump())


def effective_policy(
    pod_default: PolicySpec | None, service_policy: PolicySpec | None, service_declares: bool
) -> ToolPolicy:
    """A service's ``tool-policy`` replaces the pod default wholesale; ``null`` suppresses it."""
    chosen = service_policy if service_declares else pod_default
    return chosen.to_policy() if chosen is not None else ToolPolicy()


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


LabelMap = dict[
    Annotated[
        str, Field(pattern=r"^([a-z0-9.-]+/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
    ],
    Annotated[str, Field(pattern=r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")],
]


class OperatorPeer(_Spec):
    """Who may reach the operator port on Kubernetes (SPEC §13.2): Pods with these labels, in
    namespaces with these labels (either alone: any Pod of those namespaces, or those Pods of
    the pod's own namespace)."""

    namespace_labels: LabelMap | None = Field(default=None, alias="namespace-labels", min_length=1)
    pod_labels: LabelMap | None = Field(default=None, alias="pod-labels", min_length=1)

    @model_validator(mode="after")
    def _names_someone(self) -> OperatorPeer:
        if not self.namespace_labels and not self.pod_labels:
            raise ValueError("name namespace-labels, pod-labels or both")
        return self


class EdgeSpec(_Spec):
    """``x-claw.edge``: the sidecar's connection bounds on the agents' port (SPEC §10)."""

    max_connections: _Positive | None = Field(default=None, alias="max-connections")
    max_connections_per_peer: _Positive | None = Field(
        default=None, alias="max-connections-per-peer"
    )
    head_timeout_ms: _Positive | None = Field(default=None, alias="head-timeout-ms")
    body_idle_timeout_ms: _Positive | None = Field(default=None, alias="body-idle-timeout-ms")
    keepalive_timeout_ms: _Positive | None = Field(default=None, alias="keepalive-timeout-ms")


class PodClaw(_Spec):
    """Top-level ``x-claw`` of a pod file."""

    pod: str | None = Field(
        default=None, pattern=AGENT_ID.pattern, description="default: directory name"
    )
    root: str | None = Field(
        default=None,
        description="directory (relative to the pod file) whose tree every file named by the "
        "pod or its descriptors must stay in; default: the pod file's directory",
    )
    mode: Mode = "mediated"
    on_mixed: OnMixed = Field(default="refuse", alias="on-mixed")
    tool_injection: ToolInjection = Field(
        default="auto", alias="tool-injection", description=TOOL_INJECTION_HELP
    )
    providers: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")], ProviderSpec] | None = (
        Field(default=None, min_length=1, description="default: openai and anthropic")
    )
    routes: dict[ModelEntry, Annotated[list[RouteTargetSpec], Field(min_length=1)]] | None = Field(
        default=None,
        description="model glob -> ordered fallback targets (a provider, or {provider, model}); "
        "first matching glob wins (SPEC §14)",
    )
    tools_defaults: list[GrantItem] | None = Field(default=None, alias="tools-defaults")
    tool_policy_defaults: PolicySpec | None = Field(default=None, alias="tool-policy-defaults")
    defer_tools_over: Annotated[int, Strict(), Field(ge=0)] | None = Field(
        default=None,
        alias="defer-tools-over",
        description="an agent granted more tools than this is offered them only once the model "
        "searched for them (SPEC §23)",
    )
    max_body_bytes: Annotated[int, Strict(), Field(gt=0)] | None = Field(
        default=None, alias="max-body-bytes"
    )
    upstream_timeout_ms: Annotated[int, Strict(), Field(gt=0)] | None = Field(
        default=None, alias="upstream-timeout-ms"
    )
    principals: dict[Annotated[str, Field(pattern=NAME)], PrincipalSpec] | None = Field(
        default=None, description="named credentials of tool services (SPEC §9.1)"
    )
    tool_rules: list[RuleSpec] | None = Field(default=None, alias="tool-rules")
    approvals: ApprovalsSpec | None = None
    budgets: dict[str, BudgetSpec] | None = Field(
        default=None,
        description="agent id, agent service or '*' -> daily budget in tokens and/or USD",
    )
    budget_groups: dict[Annotated[str, Field(pattern=NAME)], BudgetGroupSpec] | None = Field(
        default=None,
        alias="budget-groups",
        description="group -> its agents and their daily budget together, across every pod "
        "sharing the store (SPEC §24)",
    )
    shared_limits: SharedLimitsSpec | None = Field(
        default=None,
        alias="shared-limits",
        description="rates and budgets counted in Redis/Valkey, shared across sidecars",
    )
    identity: IdentitySpec | None = Field(
        default=None, description="agents may present this issuer's JWT (SPEC §21)"
    )
    end_users: EndUsersSpec | None = Field(
        default=None,
        alias="end-users",
        description="the header and issuer of the end user's token a runner passes (SPEC §21)",
    )
    end_user_limits: EndUserLimitsSpec | None = Field(
        default=None,
        alias="end-user-limits",
        description="each end user's daily budget, across the pod's agents (SPEC §21)",
    )
    operator_access: list[OperatorPeer] | None = Field(
        default=None,
        alias="operator-access",
        min_length=1,
        description="--target kubernetes: who may reach the operator port; default: namespaces "
        "labelled clawpod.io/operator: 'true'",
    )
    taint: TaintMode | None = Field(default=None, description=TAINT_HELP)
    egress_allow: EgressAllow | None = Field(
        default=None,
        alias="egress-allow",
        description="hosts a tainted request's arguments may name in URLs, for every service",
    )

    @field_validator("taint", mode="before")
    @classmethod
    def _off_is_a_word(cls, value: object) -> object:
        # YAML 1.1 (PyYAML) reads a bare `off` as false.
        return "off" if value is False else value

    edge: EdgeSpec | None = None


class AgentMarker(_Spec):
    count: Annotated[int, Strict(), Field(ge=1, le=1000)] | None = Field(
        default=None, description="N agents with ids <service>-0 .. <service>-N-1"
    )


class ServiceClaw(_Spec):
    """``x-claw`` of a service: a tool service (``describe``/``url``) or an agent (``agent``)."""

    describe: str | None = Field(
        default=None, description="descriptor path, relative to the pod file"
    )
    url: str | None = Field(
        default=None, pattern=r"^https?://[^\s]+$", description="base URL override"
    )
    agent: AgentMarker | None = Field(default=None, description="marks an agent: {} or {count: N}")
    mode: Mode | None = None
    tools: list[GrantItem] | None = None
    tool_policy: PolicySpec | None = Field(default=None, alias="tool-policy")
    surfaces: list[Annotated[str, Field(pattern=SURFACE.pattern)]] | None = None
    tool_rules: list[RuleSpec] | None = Field(default=None, alias="tool-rules")
    tool_injection: ToolInjection | None = Field(
        default=None, alias="tool-injection", description=TOOL_INJECTION_HELP
    )
    egress_allow: EgressAllow | None = Field(
        default=None,
        alias="egress-allow",
        description="hosts a tainted request's arguments to this service's tools may name",
    )

    @property
    def is_agent(self) -> bool:
        return "agent" in self.model_fields_set


def _located(
    reader: PodReader, exc: ValidationError, prefix: Where, service: str | None
) -> CompileError:
    located = validation_error(exc, str(reader.file), reader.lines, prefix)
    located.service = service
    return located


def read_pod_claw(reader: PodReader) -> PodClaw:
    """The pod's own ``x-claw`` block, validated."""
    raw = reader.data.get("x-claw") or {}
    if not isinstance(raw, dict):
        raise reader.fail("x-claw must be a mapping", ("x-claw",))
    try:
        claw = PodClaw.model_validate(raw)
    except ValidationError as exc:
        raise _located(reader, exc, ("x-claw",), None) from None
    for index, item in enumerate(claw.tools_defaults or []):
        if not isinstance(item, Grant):
            raise reader.fail(
                "'...' cannot be used inside tools-defaults",
                ("x-claw", "tools-defaults", index),
            )
    return claw


def read_service_claw(reader: PodReader, name: str) -> ServiceClaw | None:
    """Service ``name``'s ``x-claw`` block, validated; None when it has none."""
    definition = reader.services[name]
    if not isinstance(definition, dict):
        raise reader.fail("a service must be a mapping", ("services", name), name)
    if "x-claw" not in definition:
        return None
    prefix = ("services", name, "x-claw")
    raw = definition["x-claw"]
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise reader.fail("x-claw must be a mapping", prefix, name)
    try:
        claw = ServiceClaw.model_validate(raw)
    except ValidationError as exc:
        raise _located(reader, exc, prefix, name) from None
    if claw.is_agent and claw.agent is None:
        claw.agent = AgentMarker()
    if not claw.is_agent:
        for attr, key in AGENT_ONLY_FIELDS.items():
            if attr in claw.model_fields_set:
                raise reader.fail(
                    f"'{key}' applies to agents only (add 'agent: {{}}')", (*prefix, key), name
                )
    elif claw.describe or claw.url:
        key = "describe" if claw.describe else "url"
        raise reader.fail("an agent cannot also be a tool service", (*prefix, key), name)
    return claw
