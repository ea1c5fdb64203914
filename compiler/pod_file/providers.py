"""LLM providers of a pod (``x-claw.providers``): their model and the defaults when absent."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    field_validator,
    model_validator,
)

from ...sidecar.manifest import (
    BILLING_HEADERS,
    Price,
    Protocol,
    Provider,
    RouteTarget,
    StreamTools,
    is_model_glob,
)
from ...sidecar.model.known_models import KNOWN_MODELS
from ...sidecar.model.usage import DEFAULT_PRICE, price_of
from .reader import PodReader
from .reserved import ENV_NAME

# An exact id or a glob: letters, digits and the punctuation of real ids (`provider/model`,
# Ollama's `name:tag`, Vertex's `model@version`), plus the glob characters `*`, `?`, `[...]`.
MODEL_ENTRY = r"^[A-Za-z0-9._:/@+*?\[\]!-]+$"
ModelEntry = Annotated[str, StringConstraints(pattern=MODEL_ENTRY, max_length=256)]
# Exact families: a bare `o*` would also route `openrouter/...` or `ollama/...` to OpenAI.
OPENAI_MODELS = ["gpt-*", "o1*", "o3*", "o4*", "chatgpt-*", "codex-*"]
ANTHROPIC_MODELS = ["claude-*"]
UsdPerMillion = Annotated[float, Field(ge=0)]
# A header value sent as is: printable ASCII, no line breaks.
HeaderValue = Annotated[str, StringConstraints(pattern=r"^[\x20-\x7e]+$", max_length=1024)]


class PriceSpec(BaseModel):
    """USD per million tokens of the models a glob matches."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    input: UsdPerMillion
    cached_input: UsdPerMillion | None = Field(
        default=None, alias="cached-input", description="default: the input price"
    )
    output: UsdPerMillion
    cache_write: UsdPerMillion | None = Field(
        default=None, alias="cache-write", description="default: the input price"
    )

    def to_price(self) -> Price:
        cached = self.input if self.cached_input is None else self.cached_input
        return Price(
            input=self.input, cached_input=cached, output=self.output, cache_write=self.cache_write
        )


class ProviderSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api: Annotated[str, Field(pattern="^(openai|anthropic|chat-completions|responses)$")] = Field(
        description="wire protocol: openai (Chat Completions and Responses) | anthropic "
        "(Messages) | chat-completions (only: most local servers) | responses (only)"
    )
    base_url: str = Field(alias="base-url", pattern=r"^https?://[^\s]+$")
    key_env: str | list[str] = Field(
        alias="key-env", description="the variable of the key, or a list of them (a key pool)"
    )
    models: list[ModelEntry] = Field(
        description="exact model ids (listed by /v1/models) and globs routed here; [] for a "
        "provider reached only through routes"
    )
    timeout_ms: Annotated[int, Strict(), Field(gt=0)] = Field(
        default=600000, alias="timeout-ms", description="bound of one model call, in ms"
    )
    first_byte_timeout_ms: Annotated[int, Strict(), Field(gt=0)] | None = Field(
        default=None,
        alias="first-byte-timeout-ms",
        description="no first byte in time: the route's next target takes the call",
    )
    prices: dict[ModelEntry, PriceSpec] = Field(
        default_factory=dict, description="model glob -> USD per million tokens"
    )

    @field_validator("key_env")
    @classmethod
    def _key_names(cls, key_env: str | list[str]) -> str | list[str]:
        names = [key_env] if isinstance(key_env, str) else key_env
        if not names:
            raise ValueError("list at least one key variable")
        if len(set(names)) != len(names):
            raise ValueError("a key variable is listed twice")
        for name in names:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} should match pattern '{ENV_NAME.pattern}'")
        return key_env

    max_output_tokens: Annotated[int, Strict(), Field(gt=0)] | None = Field(
        default=None,
        alias="max-output-tokens",
        description="what a request without an output cap is held at against a budget while "
        "it runs (default: its model's most output, from the built-in table, else 32768)",
    )
    headers: dict[str, HeaderValue] = Field(
        default_factory=dict,
        description="billing headers sent on every request (never taken from agents): "
        "OpenAI-Organization, OpenAI-Project for openai APIs; anthropic-beta for anthropic",
    )

    @model_validator(mode="after")
    def _billing_headers_only(self) -> ProviderSpec:
        allowed = BILLING_HEADERS[_API_GRAMMAR[self.api][0]]
        for name in self.headers:
            if name.lower() not in allowed:
                raise ValueError(
                    f"headers: {name!r} is not a billing header of an {self.api} provider "
                    f"(allowed: {', '.join(allowed)})"
                )
        lowered = [name.lower() for name in self.headers]
        if len(set(lowered)) != len(lowered):
            raise ValueError("headers: a header is set twice")
        return self

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
            if not brackets_balanced(model):
                raise ValueError(f"{model!r}: unbalanced '[' ']' in a glob")
        return models

    def to_provider(self) -> Provider:
        api, protocols = _API_GRAMMAR[self.api]
        return Provider(
            api=api,
            protocols=protocols,
            base_url=self.base_url,
            key_env=self.key_env,
            models=self.models,
            timeout_ms=self.timeout_ms,
            first_byte_timeout_ms=self.first_byte_timeout_ms,
            prices={glob: p.to_price() for glob, p in self.prices.items()} or None,
            stream_tools=self.stream_tools,
            headers={name.lower(): value for name, value in self.headers.items()} or None,
            max_output_tokens=self.max_output_tokens,
        )


# A pod's ``api`` -> the provider's API family and the protocols it serves (None: all).
_API_GRAMMAR: dict[str, tuple[Literal["openai", "anthropic"], list[Protocol] | None]] = {
    "openai": ("openai", None),
    "anthropic": ("anthropic", None),
    "chat-completions": ("openai", ["chat"]),
    "responses": ("openai", ["responses"]),
}


class RouteTargetSpec(BaseModel):
    """A fallback target: a provider's name, or ``{provider, model}`` for a provider that
    knows the model by its own id."""

    model_config = ConfigDict(extra="forbid")

    provider: str = Field(min_length=1)
    model: ModelEntry | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: object) -> object:
        return {"provider": value} if isinstance(value, str) else value

    def to_target(self) -> RouteTarget:
        return RouteTarget(provider=self.provider, model=self.model)


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


def warn_unpriced(reader: PodReader, providers: dict[str, Provider]) -> None:
    """Under a USD budget, each provider model glob whose models the prices do not cover: a
    request for one is refused for an agent with a USD budget (it could not be charged). A
    glob is covered when every published id it matches is priced (``known_models.py``) and,
    matching none, when the glob itself is a priced id or a price glob of the provider."""
    for name, provider in providers.items():
        own = provider.prices or {}
        if DEFAULT_PRICE in own:
            continue
        for glob in provider.models:
            known = (
                [m for m in KNOWN_MODELS if fnmatchcase(m, glob)] if is_model_glob(glob) else [glob]
            )
            priced = glob in own if not known else all(price_of(m, own) for m in known)
            if not priced:
                missing = ", ".join(m for m in known if not price_of(m, own)) or glob
                reader.warn(
                    f"no price for {missing}: an agent with a USD budget is refused these "
                    "models; price them in prices (or a 'default' entry)",
                    ("x-claw", "providers", name, "models"),
                )


def brackets_balanced(model: str) -> bool:
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
