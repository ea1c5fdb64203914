"""The one tool executor: validate arguments, build the HTTP request, call the service, wrap
the answer in the envelope the model sees (SPEC 4.2 points 7, 8 and 16).

Used by mediated mode and by the MCP endpoint alike, so both modes share encoding, limits and
error codes.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode

import orjson
from clawpod.sidecar.execution.outcome import ToolOutcome, error_envelope
from clawpod.sidecar.manifest import ManagedTool
from clawpod.sidecar.observability.metrics import Metrics, connection_counts
from clawpod.sidecar.path_template import split_path_template
from clawpod.sidecar.transport import (
    ConnectError,
    ConnectionClosed,
    HttpClient,
    Response,
    Timeout,
    TransportError,
)
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

CLAW_ID = "claw_id"
QUERY_METHODS = frozenset({"GET", "DELETE"})
MAX_REPORTED_SCHEMA_ERRORS = 8
MAX_ERROR_TEXT = 300
# How far past the result limit a body is still read (and discarded) to learn its real size.
MAX_COUNTED_BODY_BYTES = 64 * 1024 * 1024
# Tool calls beyond this many at once to one service wait for a free connection.
MAX_CONNECTIONS_PER_SERVICE = 128
USER_AGENT = "clawpod-sidecar"
REDACTED = b"[redacted]"
MAX_REMEMBERED_ARGUMENTS = 1024
MAX_REMEMBERED_TEXT = 1024


class CheckedArguments(dict[str, Any]):
    """Arguments that passed ``tool``'s schema. Handing them back to :meth:`ToolExecutor.execute`
    skips a second validation (mediation checks first, for duplicate detection, then executes).
    Treat them as read-only."""

    __slots__ = ("tool",)

    def __init__(self, tool: ManagedTool, arguments: dict[str, Any]) -> None:
        super().__init__(arguments)
        self.tool = tool


@dataclass(frozen=True, slots=True)
class _PreparedTool:
    """Per-tool work done once: the compiled validator and the parsed path template."""

    tool: ManagedTool
    validator: Draft202012Validator
    path_parts: tuple[str, ...]  # literal, placeholder, literal, placeholder, ..., literal
    base_url: str


class ToolExecutor:
    def __init__(
        self, env: Mapping[str, str] | None = None, metrics: Metrics | None = None
    ) -> None:
        self._env = env if env is not None else os.environ
        self._metrics = metrics
        self._prepared: dict[int, _PreparedTool] = {}
        self._client: HttpClient | None = None
        self._inflight: set[asyncio.Task[ToolOutcome]] = set()
        self.connections = connection_counts(metrics, "tools")
        # Validation is a pure function of tool and text, and costs more than the rest of a
        # call's preparation; agents repeat the same small calls (context, quotes) often.
        self._valid_texts: dict[tuple[int, str], CheckedArguments] = {}
        # labels() costs more than the increment; children are looked up once per tool/outcome.
        self._metric_children: dict[tuple[str, str], tuple[Any, Any]] = {}

    async def start(self) -> None:
        if self._client is not None:
            return
        self._client = HttpClient(
            # Shorter than common server idle timeouts, so a pooled socket is not reused just
            # as the service closes it.
            keepalive_s=15,
            connect_timeout_s=30,
            max_connections_per_origin=MAX_CONNECTIONS_PER_SERVICE,
            counts=self.connections,
            default_headers={"User-Agent": USER_AGENT},
        )

    @property
    def http(self) -> HttpClient | None:
        return self._client

    async def close(self) -> None:
        """Let calls already sent finish (they are shielded from callers), then close the pool."""
        if self._inflight:
            await asyncio.wait(list(self._inflight))
        if self._client is not None:
            await self._client.close()
            self._client = None

    # -- arguments ---------------------------------------------------------------------------

    def check_arguments(
        self, tool: ManagedTool, arguments: str | dict[str, Any] | None
    ) -> dict[str, Any] | ToolOutcome:
        """Parse (raw JSON text from the model, or a dict) and validate against the tool's schema.

        Returns the arguments as a dict, or an ``invalid_arguments`` outcome whose message tells
        the model what to fix.
        """
        started = time.perf_counter()
        if isinstance(arguments, CheckedArguments) and arguments.tool is tool:
            return arguments
        memo_key = (id(tool), arguments) if _memoizable(arguments) else None
        if memo_key is not None:
            known = self._valid_texts.get(memo_key)
            if known is not None and known.tool is tool:
                return CheckedArguments(tool, known)
        parsed = _parse_arguments(arguments)
        if isinstance(parsed, str):
            return _invalid(parsed, started)
        problems = _schema_problems(self._prepare(tool).validator, parsed)
        if problems:
            return _invalid(
                f"arguments do not match the input schema of {tool.presented}: {problems}", started
            )
        checked = CheckedArguments(tool, parsed)
        if memo_key is not None:
            self._remember_valid(memo_key, CheckedArguments(tool, checked))
        return checked

    def _remember_valid(self, key: tuple[int, str], checked: CheckedArguments) -> None:
        if len(self._valid_texts) >= MAX_REMEMBERED_ARGUMENTS:
            self._valid_texts.pop(next(iter(self._valid_texts)))
        self._valid_texts[key] = checked

    def _prepare(self, tool: ManagedTool) -> _PreparedTool:
        prepared = self._prepared.get(id(tool))
        if prepared is None or prepared.tool is not tool:
            validator = Draft202012Validator(
                tool.input_schema, format_checker=Draft202012Validator.FORMAT_CHECKER
            )
            prepared = _PreparedTool(
                tool=tool,
                validator=validator,
                path_parts=split_path_template(tool.execution.path),
                base_url=tool.execution.base_url.rstrip("/"),
            )
            self._prepared[id(tool)] = prepared
        return prepared

    # -- execution ---------------------------------------------------------------------------

    async def execute(
        self,
        agent_id: str,
        tool: ManagedTool,
        arguments: str | dict[str, Any] | None,
        *,
        timeout_s: float,
        max_result_bytes: int,
    ) -> ToolOutcome:
        started = time.perf_counter()
        checked = self.check_arguments(tool, arguments)
        if isinstance(checked, ToolOutcome):
            self._record(tool, checked)
            return checked
        try:
            request = self._build_request(agent_id, tool, checked)
        except _RequestProblem as problem:
            self._record(tool, problem.outcome)
            return problem.outcome
        if self._client is None:
            raise RuntimeError("ToolExecutor.start() was not awaited")
        # The exchange runs as its own task: if the caller is cancelled (client disconnect),
        # a call already on its way to the service still completes (SPEC 4.2 point 16).
        task = asyncio.ensure_future(
            self._exchange(self._client, request, timeout_s, max_result_bytes, started)
        )
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return await asyncio.shield(task)

    def _record(self, tool: ManagedTool, outcome: ToolOutcome) -> None:
        if self._metrics is None:
            return
        outcome_label = outcome.error_code or "ok"
        children = self._metric_children.get((tool.name, outcome_label))
        if children is None:
            children = (
                self._metrics.tool_calls.labels(tool=tool.name, outcome=outcome_label),
                self._metrics.tool_latency.labels(tool=tool.name),
            )
            self._metric_children[(tool.name, outcome_label)] = children
        children[0].inc()
        children[1].observe(outcome.latency_ms / 1000)

    def _build_request(
        self, agent_id: str, tool: ManagedTool, arguments: dict[str, Any]
    ) -> _Request:
        """The HTTP request for a validated call; raises :class:`_RequestProblem` if it cannot
        be built (a path parameter missing or unusable, a credential not configured)."""
        prepared = self._prepare(tool)
        execution = tool.execution
        remaining = dict(arguments)
        path = _fill_path(prepared.path_parts, agent_id, remaining)
        url = prepared.base_url + path
        body: bytes | None = None
        headers: dict[str, str] = {"Accept": "application/json"}
        if execution.method in QUERY_METHODS or execution.body == "none":
            query = _query_string(remaining)
            if query:
                url += ("&" if "?" in path else "?") + query
        else:
            payload = {execution.body_key: remaining} if execution.body_key else remaining
            body = orjson.dumps(payload)
            headers["Content-Type"] = "application/json"
        credential = self._credential_header(tool)
        secrets: tuple[bytes, ...] = ()
        if credential is not None:
            headers[credential[0]] = credential[1]
            # A service that echoes the secret (or basic auth's base64 of it) must not hand it
            # to the model.
            secrets = (self._env.get(tool.execution.auth.env or "", "").encode(),)
            if tool.execution.auth.type == "basic":
                secrets += (credential[1].removeprefix("Basic ").encode(),)
        return _Request(tool, execution.method, url, headers, body, secrets)

    def _credential_header(self, tool: ManagedTool) -> tuple[str, str] | None:
        auth = tool.execution.auth
        if auth.type == "none" or auth.env is None:
            return None
        secret = self._env.get(auth.env)
        if not secret:
            raise _credential_problem(
                f"the credential for {tool.execution.service} is not configured: environment "
                f"variable {auth.env} is not set in the sidecar"
            )
        if any(c in secret for c in "\r\n\0"):
            raise _credential_problem(
                f"the credential in environment variable {auth.env} contains a line break or NUL"
            )
        if auth.type == "bearer":
            return "Authorization", f"Bearer {secret}"
        if auth.type == "header":
            return auth.header or "", secret
        if ":" not in secret:
            raise _credential_problem(
                f"environment variable {auth.env} must hold user:password for basic auth"
            )
        return "Authorization", "Basic " + base64.b64encode(secret.encode()).decode()

    async def _exchange(
        self,
        client: HttpClient,
        request: _Request,
        timeout_s: float,
        max_result_bytes: int,
        started: float,
    ) -> ToolOutcome:
        outcome = await _send(client, request, timeout_s, max_result_bytes, started)
        self._record(request.tool, outcome)
        return outcome


class _RequestProblem(Exception):
    def __init__(self, outcome: ToolOutcome) -> None:
        super().__init__(outcome.envelope["error"]["message"])
        self.outcome = outcome


async def _send(
    client: HttpClient,
    request: _Request,
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
        return _transport_failure(exc, timeout_s, started)
    try:
        # Keep enough past the cut that a credential straddling it is redacted whole, not
        # shown in part.
        overlap = max(map(len, request.secrets), default=0)
        body, original = await _read_limited(response, max_result_bytes + overlap)
    except TransportError as exc:
        return _transport_failure(exc, timeout_s, started)
    finally:
        response.release()
    body = _redacted(body, request.secrets)
    return _outcome_for(response, body, original, max_result_bytes, started)


def _transport_failure(exc: TransportError, timeout_s: float, started: float) -> ToolOutcome:
    """The envelope for a call that got no complete answer; ``executed`` says whether the
    service may have acted on it."""
    if isinstance(exc, Timeout):
        message = f"the service did not answer within {timeout_s:g} s"
        return _failed("timeout", message, exc.request_sent, started)
    if isinstance(exc, ConnectError):
        message = f"could not connect to the service ({exc.reason})"
        return _failed("unreachable", message, False, started)
    if isinstance(exc, ConnectionClosed):
        message = "the service closed the connection before answering"
        return _failed("unreachable", message, exc.request_sent, started)
    message = f"the service's answer could not be read ({exc.message})"
    return _failed("invalid_response", message, True, started)


@dataclass(frozen=True, slots=True)
class _Request:
    tool: ManagedTool
    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None
    secrets: tuple[bytes, ...] = ()


def _redacted(body: bytes, secrets: tuple[bytes, ...]) -> bytes:
    for secret in secrets:
        if secret and secret in body:
            body = body.replace(secret, REDACTED)
    return body


# -- argument helpers --------------------------------------------------------------------------


def _parse_arguments(arguments: str | dict[str, Any] | None) -> dict[str, Any] | str:
    """The arguments as a dict, or a message explaining why they are not a JSON object."""
    if arguments is None:
        return {}
    if isinstance(arguments, dict):
        return arguments
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError as exc:
        return (
            f"arguments are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            "send a single JSON object that matches the tool's input schema"
        )
    if not isinstance(value, dict):
        return f"arguments must be a JSON object, not {_json_type(value)}"
    return value


def _memoizable(arguments: object) -> bool:
    return isinstance(arguments, str) and len(arguments) <= MAX_REMEMBERED_TEXT


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "null"


def _schema_problems(validator: Draft202012Validator, arguments: dict[str, Any]) -> str:
    errors = sorted(validator.iter_errors(arguments), key=_error_sort_key)
    if not errors:
        return ""
    shown = [
        f"at {error.json_path}: {_cut(error.message)}"
        for error in errors[:MAX_REPORTED_SCHEMA_ERRORS]
    ]
    if len(errors) > MAX_REPORTED_SCHEMA_ERRORS:
        shown.append(f"and {len(errors) - MAX_REPORTED_SCHEMA_ERRORS} more")
    return "; ".join(shown)


def _error_sort_key(error: ValidationError) -> tuple[str, str]:
    return error.json_path, error.message


def _cut(text: str, limit: int = MAX_ERROR_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _invalid(message: str, started: float | None = None) -> ToolOutcome:
    return ToolOutcome(
        envelope=error_envelope("invalid_arguments", message),
        error_code="invalid_arguments",
        status=None,
        executed=False,
        latency_ms=0.0 if started is None else (time.perf_counter() - started) * 1000,
    )


def _credential_problem(message: str) -> _RequestProblem:
    return _RequestProblem(
        ToolOutcome(
            envelope=error_envelope("credential_missing", message),
            error_code="credential_missing",
            status=None,
            executed=False,
            latency_ms=0.0,
        )
    )


# -- request helpers ---------------------------------------------------------------------------


def _fill_path(parts: tuple[str, ...], agent_id: str, remaining: dict[str, Any]) -> str:
    """Fill placeholders (each value one encoded path segment); consumed arguments are removed
    from ``remaining``."""
    pieces: list[str] = []
    for index, part in enumerate(parts):
        if index % 2 == 0:
            pieces.append(part)
            continue
        if part == CLAW_ID:
            # Never from arguments: a model cannot act as another agent.
            remaining.pop(CLAW_ID, None)
            value: Any = agent_id
        elif part in remaining:
            value = remaining.pop(part)
        else:
            raise _RequestProblem(_invalid(f"path parameter {part!r} is required"))
        segment = _segment(value)
        if segment in ("", ".", ".."):
            message = f"path parameter {part!r} must not be empty, '.' or '..'"
            raise _RequestProblem(_invalid(message))
        pieces.append(segment)
    return "".join(pieces)


def _segment(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    # safe="" encodes "/", "?", "#", "%", CR/LF, NUL and all non-ASCII: one segment, always.
    return quote(text, safe="")


def _query_string(arguments: dict[str, Any]) -> str:
    """Scalars as text, arrays as repeated keys, objects as JSON text; null values are left out."""
    pairs: list[tuple[str, str]] = []
    for key, value in arguments.items():
        if value is None:
            continue
        if isinstance(value, list):
            pairs.extend((key, _query_value(item)) for item in value if item is not None)
        else:
            pairs.append((key, _query_value(value)))
    return urlencode(pairs, quote_via=quote, safe="")


def _query_value(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


# -- response helpers --------------------------------------------------------------------------


async def _read_limited(response: Response, limit: int) -> tuple[bytes, int]:
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


def _outcome_for(
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
        data = _decode_body(body[:limit] if truncated else body, response.content_type, truncated)
        if isinstance(data, _Undecodable):
            code = "invalid_response"
            envelope = error_envelope(code, data.reason, status)
        elif status < 300:
            code = None
            envelope = {"ok": True, "status": status, "data": data}
        else:
            code = f"http_{status}"
            envelope = error_envelope(
                code, f"the service answered {status} {_phrase(status)}", status
            )
            if data is not None:
                envelope["data"] = data
    if truncated:
        envelope["truncated"] = True
        envelope["original_bytes"] = original
    return ToolOutcome(
        envelope=envelope,
        error_code=code,
        status=status,
        executed=True,
        latency_ms=latency,
        truncated=truncated,
        original_bytes=original if truncated else None,
    )


@dataclass(frozen=True, slots=True)
class _Undecodable:
    reason: str


def _decode_body(body: bytes, content_type: str, truncated: bool) -> Any:
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
            return _Undecodable(f"the service declared {content_type} but sent invalid JSON")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return _Undecodable(
            f"the service sent {len(body)} bytes of binary content ({content_type or 'no type'})"
        )


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _failed(code: str, message: str, executed: bool, started: float) -> ToolOutcome:
    return ToolOutcome(
        envelope=error_envelope(code, message),
        error_code=code,
        status=None,
        executed=executed,
        latency_ms=(time.perf_counter() - started) * 1000,
    )
