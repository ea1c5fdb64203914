"""Outbound HTTP: pooled keep-alive HTTP/1.1 to LLM providers and tool services."""

from .client import ConnectionCounts, HttpClient, PreparedRequest
from .errors import (
    BodyTooLarge,
    ConnectError,
    ConnectionClosed,
    InvalidResponse,
    Timeout,
    TransportError,
)
from .http1 import Headers, Response

__all__ = [
    "BodyTooLarge",
    "ConnectError",
    "ConnectionClosed",
    "ConnectionCounts",
    "Headers",
    "HttpClient",
    "InvalidResponse",
    "PreparedRequest",
    "Response",
    "Timeout",
    "TransportError",
]
