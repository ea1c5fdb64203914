"""Outbound HTTP: pooled keep-alive HTTP/1.1 to LLM providers and tool services."""

from clawpod.sidecar.transport.client import HttpClient, PreparedRequest
from clawpod.sidecar.transport.errors import (
    BodyTooLarge,
    ConnectError,
    ConnectionClosed,
    InvalidResponse,
    Timeout,
    TransportError,
)
from clawpod.sidecar.transport.http1 import Headers, Response
from clawpod.sidecar.transport.pool import ConnectionCounts

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
