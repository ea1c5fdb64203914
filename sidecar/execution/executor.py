"""The one tool executor: validate arguments, build the HTTP request, call the service, wrap
the answer in the envelope the model sees (docs/contract.md §4.2 points 7, 8 and 16).

Used by mediated mode and by the MCP endpoint alike, so both modes share encoding, limits and
error codes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from clawpod.sidecar.backends.http_request import RequestProblem, build_request
from clawpod.sidecar.backends.http_result import send
from clawpod.sidecar.backends.mcp import McpBackends
from clawpod.sidecar.backends.quarantine import Quarantine
from clawpod.sidecar.execution.arguments import (
    CheckedArguments,
    memoizable,
    parse_arguments,
    schema_problems,
)
from clawpod.sidecar.manifest import ManagedTool
from clawpod.sidecar.model.outcome import ToolOutcome, invalid_arguments
from clawpod.sidecar.observability import tracing
from clawpod.sidecar.observability.metrics import Metrics, connection_counts
from clawpod.sidecar.path_template import split_path_template
from clawpod.sidecar.tasks import ShieldedTasks
from clawpod.sidecar.transport import (
    HttpClient,
)

# Tool calls beyond this many at once to one service wait for a free connection.
MAX_CONNECTIONS_PER_SERVICE = 128
USER_AGENT = "clawpod-sidecar"
MAX_REMEMBERED_ARGUMENTS = 1024


@dataclass(frozen=True, slots=True)
class _PreparedTool:
    """Per-tool work done once: the compiled validator and the parsed path template."""

    tool: ManagedTool
    validator: Draft202012Validator
    path_parts: tuple[str, ...]  # literal, placeholder, literal, placeholder, ..., literal
    base_url: str


class ToolExecutor:
    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        metrics: Metrics | None = None,
        tasks: ShieldedTasks | None = None,
    ) -> None:
        self._env = env if env is not None else os.environ
        self._metrics = metrics
        self._prepared: dict[int, _PreparedTool] = {}
        self._client: HttpClient | None = None
        self._tasks = tasks if tasks is not None else ShieldedTasks()
        # Tools of MCP services (§11.1) and the tools whose definitions drifted (§11.2).
        self.mcp = McpBackends(self._env)
        self.quarantine = Quarantine()
        self.connections = connection_counts(metrics, "tools")
        # Validation is a pure function of tool and text, and costs more than the rest of a
        # call's preparation; agents repeat the same small calls (context, quotes) often.
        self._valid_texts: dict[tuple[int, str], CheckedArguments] = {}

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
        await self._tasks.drain()
        await self.mcp.close()
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
        memo_key = (id(tool), arguments) if memoizable(arguments) else None
        if memo_key is not None:
            known = self._valid_texts.get(memo_key)
            if known is not None and known.tool is tool:
                return CheckedArguments(tool, known)
        parsed = parse_arguments(arguments)
        if isinstance(parsed, str):
            return invalid_arguments(parsed, started)
        problems = schema_problems(self._prepare(tool).validator, parsed)
        if problems:
            return invalid_arguments(
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
        idempotency_key: str | None = None,
    ) -> ToolOutcome:
        started = time.perf_counter()
        refusal = self.quarantine.refusal(tool.name)
        if refusal is not None:
            return refusal
        checked = self.check_arguments(tool, arguments)
        if isinstance(checked, ToolOutcome):
            return checked
        if tool.execution.transport == "mcp":
            with tracing.tool_span(tool.name):
                return await self._tasks.run(
                    self._call_mcp(
                        tool, checked, timeout_s, max_result_bytes, started, idempotency_key
                    )
                )
        try:
            prepared = self._prepare(tool)
            request = build_request(
                tool,
                prepared.path_parts,
                prepared.base_url,
                agent_id,
                checked,
                self._env,
                idempotency_key,
            )
        except RequestProblem as problem:
            return problem.outcome
        if self._client is None:
            raise RuntimeError("ToolExecutor.start() was not awaited")
        with tracing.tool_span(tool.name) as span:
            tracing.inject(request.headers)  # the service continues the trace
            # The exchange runs as its own task: if the caller is cancelled (client
            # disconnect), a call already on its way to the service still completes
            # (docs/contract.md §4.2 point 16).
            outcome = await self._tasks.run(
                send(self._client, request, timeout_s, max_result_bytes, started)
            )
            if outcome.error_code is not None:
                tracing.record_error(span, outcome.error_code)
            return outcome

    async def _call_mcp(
        self,
        tool: ManagedTool,
        arguments: dict[str, Any],
        timeout_s: float,
        max_result_bytes: int,
        started: float,
        idempotency_key: str | None,
    ) -> ToolOutcome:
        try:
            return await self.mcp.call(
                tool,
                dict(arguments),
                timeout_s=timeout_s,
                max_result_bytes=max_result_bytes,
                started=started,
                # What an HTTP tool sends as `Idempotency-Key` travels here as `_meta`.
                idempotency_key=idempotency_key,
            )
        except RequestProblem as problem:
            return problem.outcome
