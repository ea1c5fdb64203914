"""LLM providers of a pod (``x-claw.providers``): their model and the defaults when absent."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict

from clawpod.compiler.descriptor import ENV_NAME
from clawpod.sidecar.manifest import Provider


class ProviderSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api: Annotated[str, Field(pattern="^(openai|anthropic)$")] = Field(
        description="wire protocol: openai | anthropic"
    )
    base_url: str = Field(alias="base-url", pattern=r"^https?://[^\s]+$")
    key_env: str = Field(alias="key-env", pattern=ENV_NAME.pattern)
    models: list[str] = Field(min_length=1, description="model name globs routed here")
    timeout_ms: Annotated[int, Strict(), Field(gt=0)] = Field(
        default=600000, alias="timeout-ms", description="bound of one model call, in ms"
    )

    def to_provider(self) -> Provider:
        return Provider(
            api=self.api,
            base_url=self.base_url,
            key_env=self.key_env,
            models=self.models,
            timeout_ms=self.timeout_ms,
        )


DEFAULT_PROVIDERS = {
    "openai": Provider(
        api="openai",
        base_url="https://api.openai.com/v1",
        key_env="OPENAI_API_KEY",
        models=["gpt-*", "o*"],
    ),
    "anthropic": Provider(
        api="anthropic",
        base_url="https://api.anthropic.com",
        key_env="ANTHROPIC_API_KEY",
        models=["claude-*"],
    ),
}


def pod_providers(declared: dict[str, ProviderSpec] | None) -> dict[str, Provider]:
    """The providers a pod declares, else the two defaults."""
    if declared:
        return {name: spec.to_provider() for name, spec in declared.items()}
    return dict(DEFAULT_PROVIDERS)
