"""LLM providers of a pod (``x-claw.providers``): their model and the defaults when absent."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict, StringConstraints, field_validator

from clawpod.compiler.descriptor import ENV_NAME
from clawpod.sidecar.manifest import Provider, StreamTools

# An exact id or a glob: letters, digits and the punctuation of real ids (`provider/model`,
# Ollama's `name:tag`, Vertex's `model@version`), plus the glob characters `*`, `?`, `[...]`.
MODEL_ENTRY = r"^[A-Za-z0-9._:/@+*?\[\]!-]+$"
ModelEntry = Annotated[str, StringConstraints(pattern=MODEL_ENTRY, max_length=256)]
# Exact families: a bare `o*` would also route `openrouter/...` or `ollama/...` to OpenAI.
OPENAI_MODELS = ["gpt-*", "o1*", "o3*", "o4*", "chatgpt-*", "codex-*"]
ANTHROPIC_MODELS = ["claude-*"]


class ProviderSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api: Annotated[str, Field(pattern="^(openai|anthropic)$")] = Field(
        description="wire protocol: openai | anthropic"
    )
    base_url: str = Field(alias="base-url", pattern=r"^https?://[^\s]+$")
    key_env: str = Field(alias="key-env", pattern=ENV_NAME.pattern)
    models: list[ModelEntry] = Field(
        min_length=1, description="exact model ids (listed by /v1/models) and globs routed here"
    )
    timeout_ms: Annotated[int, Strict(), Field(gt=0)] = Field(
        default=600000, alias="timeout-ms", description="bound of one model call, in ms"
    )
    stream_tools: StreamTools = Field(
        default="auto",
        alias="stream-tools",
        description="streamed requests offering tools get answers: auto (learned) | true | false",
    )

    @field_validator("models")
    @classmethod
    def _models_are_sound(cls, models: list[str]) -> list[str]:
        duplicates = sorted({m for m in models if models.count(m) > 1})
        if duplicates:
            raise ValueError(f"listed twice: {', '.join(duplicates)}")
        for model in models:
            if not _brackets_balanced(model):
                raise ValueError(f"{model!r}: unbalanced '[' ']' in a glob")
        return models

    def to_provider(self) -> Provider:
        return Provider(
            api=self.api,
            base_url=self.base_url,
            key_env=self.key_env,
            models=self.models,
            timeout_ms=self.timeout_ms,
            stream_tools=self.stream_tools,
        )


DEFAULT_PROVIDERS = {
    "openai": Provider(
        api="openai",
        base_url="https://api.openai.com/v1",
        key_env="OPENAI_API_KEY",
        models=OPENAI_MODELS,
    ),
    "anthropic": Provider(
        api="anthropic",
        base_url="https://api.anthropic.com",
        key_env="ANTHROPIC_API_KEY",
        models=ANTHROPIC_MODELS,
    ),
}


def pod_providers(declared: dict[str, ProviderSpec] | None) -> dict[str, Provider]:
    """The providers a pod declares, else the two defaults."""
    if declared:
        return {name: spec.to_provider() for name, spec in declared.items()}
    return dict(DEFAULT_PROVIDERS)


def _brackets_balanced(model: str) -> bool:
    depth = 0
    for character in model:
        if character == "[":
            if depth:
                return False
            depth = 1
        elif character == "]":
            if not depth:
                return False
            depth = 0
    return depth == 0
