"""What every OpenAI protocol (Chat Completions, Responses) shares: the key as a Bearer token,
the error body, the client and response headers with API meaning and the model list."""

from __future__ import annotations

from typing import Any, ClassVar

from ..model.errors import ApiError

# Structured-output formats (``response_format`` / ``text.format`` types) that want data.
STRUCTURED_FORMATS = ("json_schema", "json_object")


class OpenAIShapes:
    """Mixed into each OpenAI codec ahead of ``Codec``."""

    # Never OpenAI-Organization or OpenAI-Project: they choose who pays, and a foreign one
    # makes the provider refuse every key of a pool (the pod sets them: ``BILLING_HEADERS``).
    forwarded_headers: ClassVar[tuple[str, ...]] = ("openai-beta", "idempotency-key")
    relayed_headers: ClassVar[frozenset[str]] = frozenset(
        {"x-request-id", "openai-processing-ms", "openai-version"}
    )
    relayed_header_prefixes: ClassVar[tuple[str, ...]] = ("x-ratelimit-",)

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def error_body(self, err: ApiError) -> dict[str, Any]:
        return {"error": {"message": err.message, "type": err.type, "code": err.code}}

    def models_list(self, models: list[tuple[str, str]]) -> dict[str, Any]:
        return {"object": "list", "data": [self.model_entry(p, model) for p, model in models]}

    def model_entry(self, provider: str, model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": 0, "owned_by": provider}
