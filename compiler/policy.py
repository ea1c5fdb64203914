"""Tool policy as written in the pod file, and which policy an agent ends up with."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

from clawpod.sidecar.manifest import ToolPolicy

_DEFAULTS = ToolPolicy()
Positive = Annotated[int, Strict(), Field(gt=0)]


class PolicySpec(BaseModel):
    """``tool-policy`` / ``tool-policy-defaults``: every value > 0, total >= per tool."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    max_rounds: Positive = Field(default=_DEFAULTS.max_rounds, alias="max-rounds")
    timeout_per_tool_ms: Positive = Field(
        default=_DEFAULTS.timeout_per_tool_ms, alias="timeout-per-tool-ms"
    )
    total_timeout_ms: Positive = Field(default=_DEFAULTS.total_timeout_ms, alias="total-timeout-ms")
    max_tool_result_bytes: Positive = Field(
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
