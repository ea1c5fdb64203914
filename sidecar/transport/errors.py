"""What can go wrong below HTTP semantics, and whether the server may have seen the request."""

from __future__ import annotations


class TransportError(Exception):
    """An exchange failed before a complete response was read.

    ``request_sent`` tells whether the request left the sidecar, i.e. whether the server may
    have acted on it (a tool call that timed out after sending may still have happened).
    """

    def __init__(self, message: str, *, request_sent: bool) -> None:
        super().__init__(message)
        self.message = message
        self.request_sent = request_sent


class ConnectError(TransportError):
    """No connection could be opened: refused, unresolvable host, TLS handshake failure."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"could not connect ({reason})", request_sent=False)
        self.reason = reason


class Timeout(TransportError):
    """The connection, the response head or the next body bytes took longer than allowed."""


class ConnectionClosed(TransportError):
    """The server closed or reset the connection before its response was complete."""


class InvalidResponse(TransportError):
    """The server answered with something that is not valid HTTP/1.x (or used an encoding the
    sidecar cannot decode)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, request_sent=True)


class BodyTooLarge(TransportError):
    """The body, decoded, is longer than the caller's ``max_body_bytes``: the bytes up to the
    bound were delivered, the rest is not read (the connection is closed)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the response body is larger than {limit} bytes", request_sent=True)
        self.limit = limit
