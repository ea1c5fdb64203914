"""A service's answer as the outcome the model sees: the body read up to the result limit
(its full size still counted), decoded, credentials redacted, and every transport failure
named with whether the service may have acted."""

from __future__ import annotations

import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import orjson

from ..model.outcome import ToolOutcome, answered, error_envelope
from ..model.redaction import redactor_for
from ..transport import (
    ConnectError,
    ConnectionClosed,
    HttpClient,
    Response,
    Timeout,
    TransportError,
)
from .http_request import ServiceRequest

# How far past the result limit a body is still read (and discarded) to learn its real size.
MAX_COUNTED_BODY_BYTES = 64 * 1024 * 1024


async def send(
    client: HttpClient,
    request: ServiceRequest,
    timeout_s: float,
    max_result_bytes: int,
    started: float,
) -> ToolOutcome:
    try:
        response = await client.request(
            request.method,
            request.url,
            headers=request.headers,
            body=request.body,
            timeout_s=timeout_s,
        )
    except TransportError as exc:
        return transport_failure(exc, timeout_s, started)
    try:
        # Keep enough past the cut that a credential straddling it is redacted whole, not
        # shown in part.
        overlap = max(map(len, request.secrets), default=0)
        body, original = await read_limited(response, max_result_bytes + overlap)
    except TransportError as exc:
        return transport_failure(exc, timeout_s, started)
    finally:
        response.release()
    body = redacted(body, request.secrets)
    return outcome_for(response, body, original, max_result_bytes, started)


def transport_failure(exc: TransportError, timeout_s: float, started: float) -> ToolOutcome:
    """The envelope for a call that got no complete answer; ``executed`` says whether the
    service may have acted on it."""
    if isinstance(exc, Timeout):
        message = f"the service did not answer within {timeout_s:g} s"
        return failed("timeout", message, exc.request_sent, started)
    if isinstance(exc, ConnectError):
        message = f"could not connect to the service ({exc.reason})"
        return failed("unreachable", message, False, started)
    if isinstance(exc, ConnectionClosed):
        message = "the service closed the connection before answering"
        return failed("unreachable", message, exc.request_sent, started)
    message = f"the service's answer could not be read ({exc.message})"
    return failed("invalid_response", message, True, started)


def redacted(body: bytes, secrets: tuple[bytes, ...]) -> bytes:
    """``body`` without the credentials, in whatever encoding the service echoed them."""
    return redactor_for(secrets)(body)


async def read_limited(response: Response, limit: int) -> tuple[bytes, int]:
    """Read at most ``limit + 1`` bytes to keep, but count the rest of the body (discarding it,
    up to a hard cap) so the real size can be reported."""
    kept = bytearray()
    total = 0
    while chunk := await response.read_chunk():
        total += len(chunk)
        if len(kept) <= limit:
            kept += chunk[: limit + 1 - len(kept)]
        if total >= MAX_COUNTED_BODY_BYTES:
            # Stop downloading: the unread rest closes the connection on release.
            return bytes(kept), max(total, response.content_length or 0)
    return bytes(kept), total


def outcome_for(
    response: Response,
    body: bytes,
    original: int,
    limit: int,
    started: float,
) -> ToolOutcome:
    status = response.status
    latency = (time.perf_counter() - started) * 1000
    truncated = original > limit
    envelope: dict[str, Any]
    if 300 <= status < 400:
        code: str | None = f"http_{status}"
        envelope = error_envelope(
            code, f"the service answered {status} (a redirect); redirects are not followed", status
        )
    else:
        data = decode_body(body[:limit] if truncated else body, response.content_type, truncated)
        if isinstance(data, Undecodable):
            code = "invalid_response"
            envelope = error_envelope(code, data.reason, status)
        elif status < 300:
            code = None
            envelope = {"ok": True, "status": status, "data": data}
        else:
            code = f"http_{status}"
            envelope = error_envelope(
                code, f"the service answered {status} {phrase(status)}", status
            )
            if data is not None:
                envelope["data"] = data
    return answered(envelope, code, status, latency, original, truncated)


@dataclass(frozen=True, slots=True)
class Undecodable:
    reason: str


def decode_body(body: bytes, content_type: str, truncated: bool) -> Any:
    """Parsed JSON when the body is JSON; text otherwise; the cut text when truncated."""
    if not body:
        return None
    if truncated:
        # A cut body is never valid JSON; give the model the readable prefix.
        return body.decode("utf-8", "ignore")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        if "json" in content_type:
            return Undecodable(f"the service declared {content_type} but sent invalid JSON")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return Undecodable(
            f"the service sent {len(body)} bytes of binary content ({content_type or 'no type'})"
        )


def phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def failed(code: str, message: str, executed: bool, started: float) -> ToolOutcome:
    return ToolOutcome(
        envelope=error_envelope(code, message),
        error_code=code,
        status=None,
        executed=executed,
        latency_ms=(time.perf_counter() - started) * 1000,
    )
