"""The HTTP request for a validated tool call: path placeholders filled (``claw_id`` always
from the authenticated agent), query or JSON body, and the service credential attached."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from ..manifest import ManagedTool
from ..model.canonical import digest
from ..model.checked_call import CheckedCall
from ..model.outcome import ToolOutcome, error_envelope, invalid_arguments
from ..model.redaction import credential_secrets

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
    url = base_url + path
    body: bytes | None = None
    headers: dict[str, str] = {"Accept": "application/json"}
    if execution.method in QUERY_METHODS or execution.body == "none":
        query = query_string(remaining)
        if query:
            url += ("&" if "?" in path else "?") + query
    else:
        payload = {execution.body_key: remaining} if execution.body_key else remaining
        body = orjson.dumps(payload)
        headers["Content-Type"] = "application/json"
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    credential = credential_header(tool, env)
    secrets: tuple[bytes, ...] = ()
    if credential is not None:
        headers[credential[0]] = credential[1]
        # A service that echoes the secret (or basic auth's base64 of it, or its password) must
        # not hand it to the model.
        auth = tool.execution.auth
        secrets = credential_secrets(env.get(auth.env or "", ""), auth.type)
    return ServiceRequest(tool, execution.method, url, headers, body, secrets)


def idempotency_key(pod: str, agent_id: str, call: CheckedCall, request: str) -> str:
    """The ``Idempotency-Key`` of one logical call (IETF httpapi draft: a structured-field
    string). ``request`` is the identity of the request the call belongs to (the first attempt
    of a mediated request, which its resumed attempts share; the MCP call itself), so the key is
    the same on every resumed attempt and different for every other call, also when a model
    reuses call ids (``call_0``) across requests."""
    key = digest(pod, agent_id, call.tool.name, request, call.call_id, call.canonical.decode())
    return f'"{key}"'


def credential_header(tool: ManagedTool, env: Mapping[str, str]) -> tuple[str, str] | None:
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
    if auth.type == "bearer":
        return "Authorization", f"Bearer {secret}"
    if auth.type == "header":
        return auth.header or "", secret
    if ":" not in secret:
        raise credential_problem(
            f"environment variable {auth.env} must hold user:password for basic auth"
        )
    return "Authorization", "Basic " + base64.b64encode(secret.encode()).decode()


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


def query_string(arguments: dict[str, Any]) -> str:
    """Scalars as text, arrays as repeated keys, objects as JSON text; null values are left out."""
    pairs: list[tuple[str, str]] = []
    for key, value in arguments.items():
        if value is None:
            continue
        if isinstance(value, list):
            pairs.extend((key, query_value(item)) for item in value if item is not None)
        else:
            pairs.append((key, query_value(value)))
    return urlencode(pairs, quote_via=quote, safe="")


def query_value(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()
