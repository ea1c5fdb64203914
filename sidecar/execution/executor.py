"""The one tool executor: check a call's arguments, build the HTTP request of the checked call,
call the service, wrap the answer in the envelope the model sees (docs/contract.md §4.2 points
7, 8 and 16).

:class:`ArgumentCheck` is the one check of a call, parsed from what the model wrote and checked
against the tool's input schema, with messages that tell the model what to fix: mediated mode
(the engine, through the callable it is given: the sans-IO engine imports nothing of this
module) and MCP run it once per call, and the gate and the executor take the
:class:`CheckedCall` it makes as it is. With it, what
runs a checked call: :class:`ToolRunner`, the one signature the executor and the gate in front
of it (governance/gate.py) share, and :class:`CallLimits`, the one set of limits.

Used by mediated mode and by the MCP endpoint alike (behind the gate), so both modes share
encoding, limits and error codes. Arguments arrive checked (:class:`CheckedCall`), and a
quarantined tool never gets here: the gate refuses it first.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from ..backends.http import (
    RequestProblem,
    ServiceRequest,
    build_request,
    send,
    token_unavailable,
    with_bearer,
)
from ..backends.mcp import McpBackends
from ..backends.quarantine import Quarantine
from ..identity.oauth_client import ServiceTokens, TokenUnavailable
from ..manifest import ManagedTool
from ..model.canonical import canonical_json
from ..model.conversation import CheckedCall, ToolOutcome, invalid_arguments
from ..model.end_user import EndUser
from ..observability import tracing
from ..observability.metrics import Metrics, connection_counts
from ..path_template import split_path_template
from ..tasks import ShieldedTasks
from ..transport import (
    HttpClient,
)

MAX_REPORTED_SCHEMA_ERRORS = 8
MAX_ERROR_TEXT = 300
MAX_REMEMBERED_TEXT = 1024
MAX_REMEMBERED_ARGUMENTS = 1024
Schema = dict[str, Any]


class ArgumentCheck:
    """Parse (raw JSON text from the model, or a dict) and validate against the tool's schema.

    A pure function of tool and arguments; the instance only remembers work: each tool's
    compiled validator, and which short argument texts agents repeat (context, quotes) were
    valid, since validation costs more than the rest of a call's preparation. A remembered
    text is parsed again, so every call's arguments are its own objects, whoever made the same
    call before.
    """

    def __init__(self) -> None:
        # By tool key, each with the schema it holds for: a key names one tool per agent, and
        # the agents' tools of one name (each with its principal) share their schema.
        self._validators: dict[str, tuple[Schema, Draft202012Validator]] = {}
        self._valid_texts: dict[tuple[str, str], tuple[Schema, bytes]] = {}

    def __call__(
        self, tool: ManagedTool, arguments: str | dict[str, Any] | None, call_id: str = ""
    ) -> CheckedCall | ToolOutcome:
        """The checked call, or an ``invalid_arguments`` outcome whose message tells the model
        what to fix."""
        started = time.perf_counter()
        memo_key = (tool.name, arguments) if memoizable(arguments) else None
        parsed = parse_arguments(arguments)
        if isinstance(parsed, str):
            return invalid_arguments(parsed, started)
        known = self._valid_texts.get(memo_key) if memo_key is not None else None
        if known is not None and same_schema(known[0], tool.input_schema):
            return CheckedCall(tool, parsed, known[1], tool.effect, call_id)
        problems = schema_problems(self._validator(tool), parsed)
        if problems:
            return invalid_arguments(
                f"arguments do not match the input schema of {tool.presented}: {problems}", started
            )
        checked = CheckedCall(tool, parsed, canonical_json(parsed), tool.effect, call_id)
        if memo_key is not None:
            self._remember(memo_key, (tool.input_schema, checked.canonical))
        return checked

    def _remember(self, key: tuple[str, str], known: tuple[Schema, bytes]) -> None:
        if len(self._valid_texts) >= MAX_REMEMBERED_ARGUMENTS:
            self._valid_texts.pop(next(iter(self._valid_texts)))
        self._valid_texts[key] = known

    def _validator(self, tool: ManagedTool) -> Draft202012Validator:
        compiled = self._validators.get(tool.name)
        if compiled is None or not same_schema(compiled[0], tool.input_schema):
            validator = Draft202012Validator(
                tool.input_schema, format_checker=Draft202012Validator.FORMAT_CHECKER
            )
            compiled = (tool.input_schema, validator)
            self._validators[tool.name] = compiled
        return compiled[1]


def same_schema(known: Schema, schema: Schema) -> bool:
    """The schema some work was done for is this one: the same object, or a copy of it."""
    return known is schema or known == schema


def parse_arguments(arguments: str | dict[str, Any] | None) -> dict[str, Any] | str:
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
        return f"arguments must be a JSON object, not {json_type(value)}"
    return value


def memoizable(arguments: object) -> bool:
    return isinstance(arguments, str) and len(arguments) <= MAX_REMEMBERED_TEXT


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "null"


def schema_problems(validator: Draft202012Validator, arguments: dict[str, Any]) -> str:
    errors = sorted(validator.iter_errors(arguments), key=error_sort_key)
    if not errors:
        return ""
    shown = [
        f"at {error.json_path}: {cut_text(error.message)}"
        for error in errors[:MAX_REPORTED_SCHEMA_ERRORS]
    ]
    if len(errors) > MAX_REPORTED_SCHEMA_ERRORS:
        shown.append(f"and {len(errors) - MAX_REPORTED_SCHEMA_ERRORS} more")
    return "; ".join(shown)


def error_sort_key(error: ValidationError) -> tuple[str, str]:
    return error.json_path, error.message


def cut_text(text: str, limit: int = MAX_ERROR_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class CallLimits:
    """The bounds of one call, chosen by its caller from the agent's tool policy."""

    timeout_s: float
    max_result_bytes: int
    idempotency_key: str | None = None
    """Sent with a call that is neither read-only nor idempotent (SPEC §8.2)."""
    task_started: Callable[[str], Awaitable[None]] | None = None
    """Told the id of the task an MCP service runs the call as, before it is polled: its
    caller journals it (SPEC §22)."""
    resumed_task: str | None = None
    """The MCP service's task this call already is (journaled before a restart): polled for
    its outcome, the call never sent again (§8.2)."""
    abandoned: asyncio.Event | None = None
    """Set when the caller gives up on the call after it was sent: the task an MCP service
    runs it as is cancelled there (a native task its client cancelled, SPEC §22)."""


class ToolRunner(Protocol):
    async def execute(
        self,
        agent_id: str,
        call: CheckedCall,
        limits: CallLimits,
        *,
        end_user: EndUser | None = None,
    ) -> ToolOutcome:
        """Run ``call`` for ``agent_id`` (working for ``end_user``, when verified) and say how
        it went; refusals are outcomes too."""
        ...


# Tool calls beyond this many at once to one service wait for a free connection.
MAX_CONNECTIONS_PER_SERVICE = 128
USER_AGENT = "clawpod-sidecar"


@dataclass(frozen=True, slots=True)
class _PreparedTool:
    """Per-tool work done once: the parsed path template, whether it sends an OAuth token."""

    path_parts: tuple[str, ...]  # literal, placeholder, literal, placeholder, ..., literal
    base_url: str
    oauth: bool


class ToolExecutor(ToolRunner):
    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        metrics: Metrics | None = None,
        tasks: ShieldedTasks | None = None,
    ) -> None:
        self._env = env if env is not None else os.environ
        self._metrics = metrics
        # By what the work is done on, so copies and the agents' same tools share it.
        self._prepared: dict[tuple[str, str, str], _PreparedTool] = {}
        self._client: HttpClient | None = None
        self._tasks = tasks if tasks is not None else ShieldedTasks()
        # OAuth tokens for services (SPEC §21), fetched through this executor's client.
        self.tokens = ServiceTokens(self._env)
        # Tools of MCP services (§11.1) and the tools whose definitions drifted (§11.2).
        self.mcp = McpBackends(self._env, self.tokens)
        self.quarantine = Quarantine()
        self.connections = connection_counts(metrics, "tools")
        # The one argument check of both modes: calls come back to execute() as it made them.
        self.check = ArgumentCheck()

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
        self.tokens.client = self._client

    @property
    def http(self) -> HttpClient | None:
        return self._client

    async def close(self) -> None:
        """Let calls already sent finish (they are shielded from callers), then close the pool."""
        await self._tasks.drain()
        await self.mcp.close()
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _prepare(self, tool: ManagedTool) -> _PreparedTool:
        # Keyed by what it is made of, so copies of a tool share it (not by the tool's id());
        # plain fields only: the key is read on every call.
        execution = tool.execution
        where = (execution.path, execution.base_url, execution.auth.type)
        prepared = self._prepared.get(where)
        if prepared is None:
            prepared = _PreparedTool(
                path_parts=split_path_template(where[0]),
                base_url=where[1].rstrip("/"),
                oauth=execution.auth.oauth,
            )
            self._prepared[where] = prepared
        return prepared

    # -- execution ---------------------------------------------------------------------------

    async def execute(
        self,
        agent_id: str,
        call: CheckedCall,
        limits: CallLimits,
        *,
        shielded: bool = False,
        end_user: EndUser | None = None,
    ) -> ToolOutcome:
        """``shielded``: the caller runs in a task nobody cancels (the mediated driver's), so the
        exchange runs in it; otherwise in a task of its own (a task costs ~7 µs). ``end_user``:
        the verified person the agent works for, whose token a ``token-exchange`` tool
        exchanges (SPEC §21)."""
        started = time.perf_counter()
        tool = call.tool
        if tool.execution.transport == "mcp":
            with tracing.tool_span(tool.name):
                calling = self._call_mcp(call, limits, started, end_user)
                return await (calling if shielded else self._tasks.run(calling))
        try:
            prepared = self._prepare(tool)
            request = build_request(
                tool,
                prepared.path_parts,
                prepared.base_url,
                agent_id,
                call.arguments,
                self._env,
                limits.idempotency_key,
            )
        except RequestProblem as problem:
            return problem.outcome
        if self._client is None:
            raise RuntimeError("ToolExecutor.start() was not awaited")
        # The exchange runs as its own task: if the caller is cancelled (client disconnect), a
        # call already on its way to the service still completes (docs/contract.md §4.2 point
        # 16).
        if prepared.oauth:
            exchange = self._send_with_token(request, limits, started, end_user)
        else:
            exchange = send(
                self._client, request, limits.timeout_s, limits.max_result_bytes, started
            )
        if tracing.tracer is None:  # no span to open: its context manager costs a few µs a call
            return await (exchange if shielded else self._tasks.run(exchange))
        with tracing.tool_span(tool.name) as span:
            tracing.inject(request.headers)  # the service continues the trace
            outcome = await (exchange if shielded else self._tasks.run(exchange))
            if outcome.error_code is not None:
                tracing.record_error(span, outcome.error_code)
            return outcome

    async def _send_with_token(
        self,
        request: ServiceRequest,
        limits: CallLimits,
        started: float,
        end_user: EndUser | None,
    ) -> ToolOutcome:
        """Send with the service's OAuth token; a 401 (the service did not act) drops that
        token, and the call is sent once more with a fresh one, never more."""
        assert self._client is not None
        auth = request.tool.execution.auth
        stale: str | None = None
        for _ in range(2):
            try:
                token = await self.tokens.token(
                    auth, end_user, timeout_s=limits.timeout_s, stale=stale
                )
            except TokenUnavailable as exc:
                return token_unavailable(request.tool, exc, started)
            remaining_s = limits.timeout_s - (time.perf_counter() - started)
            outcome = await send(
                self._client,
                with_bearer(request, token),
                max(remaining_s, 0.001),
                limits.max_result_bytes,
                started,
            )
            if outcome.status != 401:
                return outcome
            stale = token
        return outcome

    async def _call_mcp(
        self,
        call: CheckedCall,
        limits: CallLimits,
        started: float,
        end_user: EndUser | None,
    ) -> ToolOutcome:
        try:
            return await self.mcp.call(
                call.tool,
                dict(call.arguments),
                timeout_s=limits.timeout_s,
                max_result_bytes=limits.max_result_bytes,
                started=started,
                # What an HTTP tool sends as `Idempotency-Key` travels here as `_meta`.
                idempotency_key=limits.idempotency_key,
                end_user=end_user,
                task_started=limits.task_started,
                resumed_task=limits.resumed_task,
                abandoned=limits.abandoned,
            )
        except RequestProblem as problem:
            return problem.outcome
