"""One HTTP call of a tool, its whole trip: the request for a validated call (path
placeholders filled, ``claw_id`` always from the authenticated agent, the arguments in the
query, headers or JSON body where the descriptor placed them, the service credential attached),
sent, and the service's answer as the outcome the model sees (the body read up to the result
limit, its full size still counted, decoded, credentials redacted, and every transport failure
named with whether the service may have acted)."""

from __future__ import annotations

import base64
import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from ..manifest import ManagedTool, ToolAuth
from ..model.canonical import digest
from ..model.conversation import (
    CheckedCall,
    ToolOutcome,
    answered,
    error_envelope,
    invalid_arguments,
)
from ..model.redaction import credential_secrets, redactor_for
from ..transport import (
    ConnectError,
    ConnectionClosed,
    HttpClient,
    Response,
    Timeout,
    TransportError,
)

CLAW_ID = "claw_id"
QUERY_METHODS = frozenset({"GET", "DELETE"})


@dataclass(frozen=True, slots=True)
class ServiceRequest:
    tool: ManagedTool
    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None
    secrets: tuple[bytes, ...] = ()


class RequestProblem(Exception):
    def __init__(self, outcome: ToolOutcome) -> None:
        super().__init__(outcome.envelope["error"]["message"])
        self.outcome = outcome


def build_request(
    tool: ManagedTool,
    path_parts: tuple[str, ...],
    base_url: str,
    agent_id: str,
    arguments: dict[str, Any],
    env: Mapping[str, str],
    idempotency_key: str | None = None,
) -> ServiceRequest:
    """The HTTP request for a validated call; raises :class:`RequestProblem` if it cannot be
    built (a path parameter missing or unusable, a credential not configured). ``path_parts``
    alternate literal text and placeholder names."""
    execution = tool.execution
    if CLAW_ID in arguments:
        # A service reading it (path, query or body) would act for the agent it names.
        message = f"{CLAW_ID} is the calling agent, set by the sidecar; it is not an argument"
        raise RequestProblem(invalid_arguments(message))
    remaining = dict(arguments)
    path = fill_path(path_parts, agent_id, remaining)
    headers: dict[str, str] = {"Accept": "application/json"}
    for name, header in (execution.headers or {}).items():
        value = header_value(name, remaining.pop(name, None))
        if value is not None:
            headers[header] = value
    query = {name: remaining.pop(name) for name in execution.query or () if name in remaining}
    body: bytes | None = None
    if execution.method in QUERY_METHODS or execution.body == "none":
        query.update(remaining)
    elif execution.body_arg is not None:
        body = whole_body(execution.body_arg, remaining)
        if body is not None:
            headers["Content-Type"] = "application/json"
    else:
        payload = {execution.body_key: remaining} if execution.body_key else remaining
        body = orjson.dumps(payload)
        headers["Content-Type"] = "application/json"
    pairs = query_pairs(query)
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    auth = execution.auth
    secret = credential(tool, env)
    secrets: tuple[bytes, ...] = ()
    if secret is not None:
        if auth.type == "query":
            if auth.param in query:
                message = f"'{auth.param}' carries the service's credential; it is not an argument"
                raise RequestProblem(invalid_arguments(message))
            pairs.append((auth.param or "", secret))
        else:
            header, value = credential_header_for(auth, secret)
            headers[header] = value
        # A service that echoes the secret (or basic auth's base64 of it, or its password, or
        # the query string's encoding of it) must not hand it to the model.
        secrets = credential_secrets(secret, auth.type)
    url = base_url + path
    if pairs:
        url += ("&" if "?" in path else "?") + urlencode(pairs, quote_via=quote, safe="")
    return ServiceRequest(tool, execution.method, url, headers, body, secrets)


def idempotency_key(pod: str, agent_id: str, call: CheckedCall, request: str) -> str:
    """The ``Idempotency-Key`` of one logical call (IETF httpapi draft: a structured-field
    string). ``request`` is the identity of the request the call belongs to (the first attempt
    of a mediated request, which its resumed attempts share; the MCP call itself), so the key is
    the same on every resumed attempt and different for every other call, also when a model
    reuses call ids (``call_0``) across requests."""
    key = digest(pod, agent_id, call.tool.name, request, call.call_id, call.canonical.decode())
    return f'"{key}"'


def credential(tool: ManagedTool, env: Mapping[str, str]) -> str | None:
    """The service credential from the sidecar's environment (None for a tool without one);
    :class:`RequestProblem` when it is not configured or cannot be sent."""
    auth = tool.execution.auth
    if auth.type == "none" or auth.env is None:
        return None
    secret = env.get(auth.env)
    if not secret:
        raise credential_problem(
            f"the credential for {tool.execution.service} is not configured: environment "
            f"variable {auth.env} is not set in the sidecar"
        )
    if any(c in secret for c in "\r\n\0"):
        raise credential_problem(
            f"the credential in environment variable {auth.env} contains a line break or NUL"
        )
    if auth.type == "basic" and ":" not in secret:
        raise credential_problem(
            f"environment variable {auth.env} must hold user:password for basic auth"
        )
    return secret


def credential_header_for(auth: ToolAuth, secret: str) -> tuple[str, str]:
    if auth.type == "bearer":
        return "Authorization", f"Bearer {secret}"
    if auth.type == "header":
        return auth.header or "", secret
    return "Authorization", "Basic " + base64.b64encode(secret.encode()).decode()


def credential_header(tool: ManagedTool, env: Mapping[str, str]) -> tuple[str, str] | None:
    """The header that carries the service credential (None without one, or in the query)."""
    secret = credential(tool, env)
    if secret is None or tool.execution.auth.type == "query":
        return None
    return credential_header_for(tool.execution.auth, secret)


def with_bearer(request: ServiceRequest, token: str) -> ServiceRequest:
    """``request`` carrying a fetched OAuth token (SPEC §21), redacted from the answer like any
    credential."""
    headers = {**request.headers, "Authorization": f"Bearer {token}"}
    secrets = request.secrets + credential_secrets(token, "bearer")
    return dataclasses.replace(request, headers=headers, secrets=secrets)


def token_unavailable(tool: ManagedTool, reason: Exception, started: float) -> ToolOutcome:
    """The call was not sent: no OAuth token could be had for its service (fail closed)."""
    message = f"no access token for {tool.execution.service}: {reason}"
    return failed("token_unavailable", message, False, started)


def credential_problem(message: str) -> RequestProblem:
    return RequestProblem(
        ToolOutcome(
            envelope=error_envelope("credential_missing", message),
            error_code="credential_missing",
            status=None,
            executed=False,
            latency_ms=0.0,
        )
    )


def fill_path(parts: tuple[str, ...], agent_id: str, remaining: dict[str, Any]) -> str:
    """Fill placeholders (each value one encoded path segment); consumed arguments are removed
    from ``remaining``."""
    pieces: list[str] = []
    for index, part in enumerate(parts):
        if index % 2 == 0:
            pieces.append(part)
            continue
        if part == CLAW_ID:
            value: Any = agent_id  # the authenticated agent, never an argument
        elif part in remaining:
            value = remaining.pop(part)
        else:
            raise RequestProblem(invalid_arguments(f"path parameter {part!r} is required"))
        segment = path_segment(value)
        if segment in ("", ".", ".."):
            message = f"path parameter {part!r} must not be empty, '.' or '..'"
            raise RequestProblem(invalid_arguments(message))
        pieces.append(segment)
    return "".join(pieces)


def path_segment(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    # safe="" encodes "/", "?", "#", "%", CR/LF, NUL and all non-ASCII: one segment, always.
    return quote(text, safe="")


def query_pairs(arguments: dict[str, Any]) -> list[tuple[str, str]]:
    """Scalars as text, arrays as repeated keys, objects as JSON text; null values are left out."""
    pairs: list[tuple[str, str]] = []
    for key, value in arguments.items():
        if value is None:
            continue
        if isinstance(value, list):
            pairs.extend((key, query_value(item)) for item in value if item is not None)
        else:
            pairs.append((key, query_value(value)))
    return pairs


def whole_body(name: str, remaining: dict[str, Any]) -> bytes | None:
    """The JSON body that is one argument's value (None: no body); any other argument left
    over has no place in the request and is refused rather than dropped."""
    value = remaining.pop(name, None)
    if remaining:
        unknown = ", ".join(sorted(remaining))
        raise RequestProblem(invalid_arguments(f"unknown argument(s) for this tool: {unknown}"))
    return None if value is None else orjson.dumps(value)


def header_value(name: str, value: Any) -> str | None:
    """An argument sent as a header: a scalar as text, never a line break or control
    character (which would end the header and start another); null leaves it out."""
    if value is None:
        return None
    if isinstance(value, (list, dict)):
        message = f"argument {name!r} is sent as a header and must be a string, number or boolean"
        raise RequestProblem(invalid_arguments(message))
    text = query_value(value)
    if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in text):
        message = f"argument {name!r} is sent as a header and must not hold control characters"
        raise RequestProblem(invalid_arguments(message))
    return text


def query_value(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


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
    if request.secrets:  # a tool without a credential has nothing to redact
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
