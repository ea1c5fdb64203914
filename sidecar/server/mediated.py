"""The driver of the mediation engine: all I/O of a mediated request lives here.

It performs the engine's commands (upstream calls, tool executions, continuity reads and
writes, the client response), keeps streaming clients alive while it waits, and audits the
request exactly once at the end — also when the client went away in the middle.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import orjson

from clawpod.sidecar.audit.records import usage_record
from clawpod.sidecar.audit.trace import trace_call
from clawpod.sidecar.codecs.base import Codec
from clawpod.sidecar.codecs.streaming import ClientStream, TextDelta
from clawpod.sidecar.mediation.commands import (
    BeginStream,
    CallModel,
    Command,
    Done,
    Event,
    ExecuteTools,
    Fail,
    ModelFailed,
    ModelReplied,
    PlannedExecution,
    Recall,
    Recalled,
    Remember,
    Respond,
    ToolsDone,
)
from clawpod.sidecar.mediation.continuity import StateWriteFailed
from clawpod.sidecar.mediation.engine import MediationEngine
from clawpod.sidecar.model.errors import ApiError
from clawpod.sidecar.model.outcome import ToolOutcome, refused
from clawpod.sidecar.server.accounting import record_request
from clawpod.sidecar.server.errors import JSON_HEADERS
from clawpod.sidecar.server.exchange import Exchange
from clawpod.sidecar.server.live_call import call_model_streaming
from clawpod.sidecar.server.upstream import UpstreamError
from clawpod.sidecar.transport.keepalive import with_keepalives

if TYPE_CHECKING:
    from clawpod.sidecar.server.context import RequestContext

log = logging.getLogger("sidecar.mediation")

# SSE comment keep-alives while tools run or the model thinks; overridable for tests/operators.
# The metric label of a runner-owned call in a refused mixed round: names runners choose never
# become label values.
RUNNER_TOOL_LABEL = "(runner)"
# Status recorded when the client left before the answer (nginx's convention).
CLIENT_CLOSED = 499
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


async def handle_mediated(exchange: Exchange, ctx: RequestContext, body: dict[str, Any]) -> None:
    state = ctx.state
    engine = MediationEngine(
        ctx.codec,
        ctx.agent,
        body,
        validate=state.executor.check_arguments,
        model_timeout_s=state.config.upstream_timeout_ms / 1000,
    )
    # Its own task: a cancelled handler must not cut a loop (and its audit) short.
    await state.tasks.run(_Driver(exchange, ctx, ctx.codec, engine).run())


class _Driver:
    def __init__(
        self, exchange: Exchange, ctx: RequestContext, codec: Codec, engine: MediationEngine
    ) -> None:
        self.exchange = exchange
        self.ctx = ctx
        self.codec = codec
        self.engine = engine
        self.state = ctx.state
        self.streaming = False
        self.live: ClientStream | None = None
        """A streaming client's one lifecycle, written across every model call."""
        self._writing = asyncio.Lock()  # keep-alives and text go out whole, one at a time
        self.client_gone = False
        self.http_status = 200
        self.error_code: str | None = None

    async def run(self) -> None:
        steps = self.engine.run()
        try:
            command: Command = next(steps)
            while not isinstance(command, Respond | Fail):
                if self._client_left() and isinstance(command, CallModel | ExecuteTools):
                    self.http_status, self.error_code = CLIENT_CLOSED, "client_disconnected"
                    break
                command = steps.send(await self._perform(command))
            else:
                await self._reply(command)
        except Exception:
            log.exception("mediated request %s failed", self.ctx.request_id)
            await self._reply(Fail(500, "internal_error", "the sidecar failed on this request"))
        finally:
            steps.close()
        await self._account()

    # --- commands ---------------------------------------------------------------------------

    async def _perform(self, command: Command) -> Event:
        if isinstance(command, BeginStream):
            self.streaming = True
            self.live = self.codec.client_stream(self.engine.conversation)
            await self._guard(self.exchange.start_stream(200, SSE_HEADERS))
            return Done()
        if isinstance(command, Recall):
            return Recalled(self.state.continuity.recall(command.keys))
        if isinstance(command, Remember):
            # state-durability (issue 14.5): a failed state write never costs the answer.
            try:
                agent = self.ctx.agent.agent.id
                self.state.continuity.remember(command.key, command.messages, agent=agent)
            except StateWriteFailed as exc:
                await self._state_write_failed(exc)
            return Done()
        if isinstance(command, CallModel):
            if self.live is not None:
                return await self._keeping_alive(self._call_model_live(command, self.live))
            return await self._keeping_alive(self._call_model(command))
        if isinstance(command, ExecuteTools):
            return await self._keeping_alive(self._execute(command))
        raise TypeError(f"unknown command {type(command).__name__}")

    async def _state_write_failed(self, exc: StateWriteFailed) -> None:
        """Logged, counted and audited; the finished answer still goes out."""
        agent = self.ctx.agent.agent.id
        log.warning("request %s: %s", self.ctx.request_id, exc)
        self.state.metrics.state_write_failures.labels(store="continuity").inc()
        record = {"event": "state_write_failed", "request": self.ctx.request_id, "error": str(exc)}
        try:
            await self.state.audit.append(agent, {**record, "store": "continuity"})
        except Exception:
            log.exception("audit of a failed state write of %s failed", self.ctx.request_id)

    async def _call_model(self, command: CallModel) -> Event:
        started = time.perf_counter()
        try:
            reply = await self.state.upstream.post_json(
                self.ctx.target(), command.body, timeout_s=command.timeout_s
            )
        except UpstreamError as exc:
            return ModelFailed(exc.kind, exc.message)
        finally:
            self.state.metrics.observe_upstream(
                self.ctx.provider_name, time.perf_counter() - started
            )
        if reply.status != 200:
            body = self.state.upstream.redact(self.ctx.provider_name, reply.body)
            return ModelFailed(
                "status",
                self.codec.provider_error_message(body),
                reply.status,
                reply.headers.get("Retry-After"),
            )
        try:
            if "text/event-stream" in reply.headers.get("Content-Type", ""):
                body = self.codec.assemble_stream(reply.body)
            else:
                body = orjson.loads(reply.body)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            return ModelFailed("protocol", f"the provider's reply is not valid: {exc}")
        if not isinstance(body, dict):
            return ModelFailed("protocol", "the provider's reply is not a JSON object")
        return ModelReplied(body)

    async def _call_model_live(self, command: CallModel, live: ClientStream) -> Event:
        """The upstream streams too; text reaches the client as it arrives (SPEC §8.1)."""

        async def show(head: dict[str, Any], deltas: list[TextDelta]) -> None:
            await self._write(live.text(head, deltas))

        started = time.perf_counter()
        try:
            event = await call_model_streaming(
                self.state.upstream,
                self.ctx.target(),
                self.codec,
                self.engine.conversation,
                command.body,
                command.timeout_s,
                show,
            )
        finally:
            self.state.metrics.observe_upstream(
                self.ctx.provider_name, time.perf_counter() - started
            )
        if isinstance(event, ModelReplied):
            await self._write(live.end_turn(event.body))
        return event

    async def _execute(self, command: ExecuteTools) -> ToolsDone:
        started = time.monotonic()
        deadline = started + command.budget_s
        if command.concurrent and len(command.executions) > 1:
            outcomes = list(
                await asyncio.gather(
                    *(self._run_one(command, e, deadline) for e in command.executions)
                )
            )
        else:
            outcomes = [await self._run_one(command, e, deadline) for e in command.executions]
        return ToolsDone(outcomes, elapsed_s=time.monotonic() - started)

    async def _run_one(
        self, command: ExecuteTools, execution: PlannedExecution, deadline: float
    ) -> ToolOutcome:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return refused("timeout", "the request's total time budget ran out before this call")
        try:
            outcome = await self.state.executor.execute(
                self.ctx.agent.agent.id,
                execution.tool,
                execution.arguments,
                timeout_s=min(command.timeout_s, remaining),
                max_result_bytes=command.max_result_bytes,
            )
        except Exception:
            log.exception("tool %s failed in the executor", execution.tool.name)
            return refused("execution_failed", "the sidecar could not execute this call")
        return outcome

    async def _keeping_alive(self, work: Awaitable[Event]) -> Event:
        """Await ``work``; a streaming client gets an SSE comment every few seconds meanwhile."""
        if not self.streaming:
            return await work
        return await with_keepalives(work, self._write, self.state.sse_keepalive_s)

    # --- the client response ----------------------------------------------------------------

    async def _reply(self, command: Respond | Fail) -> None:
        status, body, headers = 200, b"", JSON_HEADERS
        if isinstance(command, Fail):
            self.http_status, self.error_code = command.status, command.code
            err = ApiError(command.status, command.code, command.message)
            if self.live is not None:
                await self._write(self.live.fail(err))
            else:
                status, body = command.status, self.codec.error_json(err)
                if command.retry_after:
                    headers = {**JSON_HEADERS, "Retry-After": command.retry_after}
        elif self.live is not None:
            await self._write(self.live.finish(command.body))
        else:
            body = orjson.dumps(command.body)
        if self.streaming:
            if not self.client_gone:
                await self._guard(self.exchange.end())
        elif not self._client_left():
            # Send now, so the audit below never delays the client.
            await self._guard(self.exchange.respond(status, body, headers))
        if self.client_gone and self.error_code is None:
            # The answer was ready but nobody was there to receive it.
            self.http_status, self.error_code = CLIENT_CLOSED, "client_disconnected"

    async def _write(self, data: bytes) -> None:
        if self.streaming and not self.client_gone and data:
            async with self._writing:
                await self._guard(self.exchange.write(data))

    async def _guard(self, operation: Any) -> None:
        """Run a client write; a client that went away must not abort the loop or its audit."""
        try:
            await operation
        except (ConnectionError, RuntimeError) as exc:
            self.client_gone = True
            log.info("client of %s went away: %s", self.ctx.request_id, exc)

    def _client_left(self) -> bool:
        if self.client_gone:
            return True
        self.client_gone = self.exchange.client_gone()
        return self.client_gone

    # --- accounting -------------------------------------------------------------------------

    async def _account(self) -> None:
        engine = self.engine
        metrics = self.state.metrics
        metrics.rounds.observe(len(engine.rounds))
        for answered in (a for calls in engine.rounds for a in calls):
            label = answered.tool.name if answered.tool else RUNNER_TOOL_LABEL
            metrics.count_tool_call(label, answered.outcome)
        usage = usage_record(
            engine.usage.input_tokens, engine.usage.output_tokens, len(engine.rounds)
        )
        try:
            await record_request(
                self.ctx,
                http_status=self.http_status,
                error_code=self.error_code,
                usage=usage,
                tool_trace=_tool_trace(engine),
            )
        except Exception:
            log.exception("audit of mediated request %s failed", self.ctx.request_id)


def _tool_trace(engine: MediationEngine) -> list[dict[str, Any]]:
    """The audit record's rounds: every call answered, rendered as MCP calls are."""
    return [
        {
            "round": number,
            "calls": [
                trace_call(a.call.id, a.tool, a.call.name, a.call.arguments, a.outcome)
                for a in calls
            ],
        }
        for number, calls in enumerate(engine.rounds, 1)
    ]
