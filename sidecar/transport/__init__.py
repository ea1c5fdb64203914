"""Outbound HTTP: pooled keep-alive HTTP/1.1 to LLM providers and tool services."""

from sidecar.transport.client import HttpClient, PreparedRequest
from sidecar.transport.errors import (
    ConnectError,
    ConnectionClosed,
    InvalidResponse,
    Timeout,
    TransportError,
)
from sidecar.transport.http1 import Headers, Response
from sidecar.transport.pool import ConnectionCounts

__all__ = [
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
