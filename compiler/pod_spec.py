"""The ``x-claw`` blocks of a pod file (SPEC section 2): the pod's, a tool service's, an agent's."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict

from clawpod.compiler.governance_spec import (
    ApprovalsSpec,
    BudgetSpec,
    PrincipalSpec,
    RuleSpec,
)
from clawpod.compiler.grants import GrantItem
from clawpod.compiler.policy import PolicySpec
from clawpod.compiler.providers import ModelEntry, ProviderSpec, RouteTargetSpec
from clawpod.sidecar.manifest import Mode, OnMixed, ToolInjection

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
TOOL_INJECTION_HELP = (
    "auto: requests that declare no tools and ask for structured output get none injected; "
    "always: every request of a mediated agent gets its tools"
)


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


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

    @property
    def is_agent(self) -> bool:
        return "agent" in self.model_fields_set
