"""Errors the client is told about, independent of the protocol that carries them."""

from __future__ import annotations

# Anthropic's error type names double as our `type` vocabulary; OpenAI clients only read
# `message`/`code` and branch on the HTTP status, so one vocabulary serves both shapes.
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    502: "upstream_error",
    504: "timeout_error",
}


class ApiError(Exception):
    """An error the client is told about, in its protocol's shape."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.type = type or _TYPE_BY_STATUS.get(status, "api_error")
        self.headers = headers or {}
        """Response headers that go with it (``retry-after``, ``x-should-retry``)."""


def internal_error() -> ApiError:
    """The one answer to a failure of the sidecar itself, on any route, in any protocol: the
    client learns that much, never a traceback."""
    return ApiError(500, "internal_error", "the sidecar failed on this request", "api_error")


# How a provider call that got no HTTP answer is told to the client, in both modes.
_UPSTREAM_FAILURES = {
    "timeout": (504, "upstream_timeout"),
    "unreachable": (502, "upstream_unreachable"),
    "protocol": (502, "upstream_protocol_error"),
    # The provider has no route for the caller's protocol (server/providers/unserved.py).
    "not_served": (400, "protocol_not_served"),
}


def upstream_failure(kind: str, message: str) -> ApiError:
    """A provider that timed out, was unreachable or broke the protocol."""
    status, code = _UPSTREAM_FAILURES.get(kind, _UPSTREAM_FAILURES["protocol"])
    return ApiError(status, code, message)
