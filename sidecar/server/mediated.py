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
from clawpod.sidecar.backends.http_request import idempotency_key
from clawpod.sidecar.codecs.base import Codec
from clawpod.sidecar.codecs.streaming import ClientStream, TextDelta
from clawpod.sidecar.execution.runner import CallLimits
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
from clawpod.sidecar.mediation.engine import MediationEngine
from clawpod.sidecar.model.errors import ApiError
from clawpod.sidecar.model.outcome import ToolOutcome, refused
from clawpod.sidecar.model.taint import TAINTED_ARGUMENT
from clawpod.sidecar.observability import tracing
from clawpod.sidecar.server import translated
from clawpod.sidecar.server.accounting import call_cost, record_request
from clawpod.sidecar.server.budget_gate import BYTES_PER_TOKEN
from clawpod.sidecar.server.errors import FINAL_HEADERS, JSON_HEADERS
from clawpod.sidecar.server.exchange import Exchange
from clawpod.sidecar.server.failover import open_upstream
from clawpod.sidecar.server.live_call import (
    Show,
    StreamUnanswered,
    call_model_streaming,
    show_whole,
)
from clawpod.sidecar.server.stream_tools import offers_tools
from clawpod.sidecar.server.unserved import NOT_SERVED, not_served_message
from clawpod.sidecar.server.upstream import UpstreamError, UpstreamTarget, read_whole
from clawpod.sidecar.state.continuity import StateWriteFailed
from clawpod.sidecar.state.journal import (
    Attempt,
    call_key,
    has_side_effects,
    history_identity,
    last_user_text,
    request_digest,
    request_identity,
)
from clawpod.sidecar.state.stored_objects import refs
from clawpod.sidecar.transport import Response
from clawpod.sidecar.transport.keepalive import with_keepalives

if TYPE_CHECKING:
    from clawpod.sidecar.server.context import RequestContext

log = logging.getLogger(__name__)

# SSE comment keep-alives while tools run or the model thinks; overridable for tests/operators.
# The metric label of a runner-owned call in a refused mixed round: names runners choose never
# become label values.
RUNNER_TOOL_LABEL = "(runner)"
# Status recorded when the client left before the answer (nginx's convention).
CLIENT_CLOSED = 499
# Failures the sidecar decides itself: the same request fails the same way (SPEC 7.2).
SIDECAR_DECIDED = frozenset(
    {
        "mixed_executor_response",
        "tool_budget_exhausted",
        "invalid_request",
        "timeout",
        "protocol_not_served",
    }
)
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


async def handle_mediated(exchange: Exchange, ctx: RequestContext, body: dict[str, Any]) -> None:
    state = ctx.state
    quarantine = state.executor.quarantine
    engine = MediationEngine(
        ctx.codec,
        quarantine.offered(ctx.agent),  # tools whose definition drifted: not offered
        body,
        check=state.executor.check,
        model_timeout_s=_model_timeout_ms(ctx) / 1000,
        withheld=quarantine.withheld(ctx.agent),
        taint_mode=state.config.taint.mode if state.config.taint is not None else "off",
    )
    # An identical request still running waits here; a failed one is resumed (SPEC 8.2).
    agent = ctx.agent.agent.id
    if engine.prepare() is None:
        conversation, api = engine.conversation, ctx.codec.api
        request = request_identity(agent, api, conversation)
        history = history_identity(agent, api, conversation)
        asked = last_user_text(conversation)
    else:
        request, history, asked = request_digest(agent, body), None, ""
    attempt = await state.journal.begin(agent, request, ctx.request_id, history, asked)
    # Its own task: a cancelled handler must not cut a loop (and its audit) short.
    await state.tasks.run(_Driver(exchange, ctx, ctx.codec, engine, attempt).run())


def _model_timeout_ms(ctx: RequestContext) -> int:
    """Each model call: its provider's timeout-ms, within the sidecar's upstream bound."""
    assert ctx.provider_name is not None
    provider = ctx.state.config.providers[ctx.provider_name]
    return min(provider.timeout_ms, ctx.state.config.upstream_timeout_ms)


class _NotJournaled(Exception):
    """The journal could not record a call about to be sent: it is not sent."""


class _Driver:
    def __init__(
        self,
        exchange: Exchange,
        ctx: RequestContext,
        codec: Codec,
        engine: MediationEngine,
        attempt: Attempt,
    ) -> None:
        self.attempt = attempt
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
        self.replayed_calls: set[str] = set()
        """Ids of calls answered from the journal of the attempt this one resumes."""
        self.cost: float | None = None  # USD of the model calls answered so far
        self.estimated = (0, 0)  # input, output tokens of calls whose provider counted none

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
        await self._end_attempt()
        await self._account()

    # --- commands ---------------------------------------------------------------------------

    async def _perform(self, command: Command) -> Event:
        if isinstance(command, BeginStream):
            self.streaming = True
            self.live = self.codec.client_stream(self.engine.conversation)
            await self._guard(self.exchange.start_stream(200, SSE_HEADERS))
            return Done()
        if isinstance(command, Recall):
            return Recalled(self.state.continuity.candidates(command.keys))
        if isinstance(command, Remember):
            # state-durability (issue 14.5): a failed state write never costs the answer.
            try:
                agent = self.ctx.agent.agent.id
                self.state.continuity.remember(
                    command.key,
                    self._scrubbed(command.messages),
                    agent=agent,
                    context=command.context,
                    origin=command.origin,
                    taint_sources=command.taint_sources,
                )
            except StateWriteFailed as exc:
                await self._state_write_failed(exc)
            return Done()
        if isinstance(command, CallModel):
            return await self._model_turn(command)
        if isinstance(command, ExecuteTools):
            # The turns asking for it go with the first call with side effects (_run_one).
            self.attempt.before_execution(
                any(has_side_effects(e.checked.tool) for e in command.executions)
            )
            return await self._keeping_alive(self._execute(command))
        raise TypeError(f"unknown command {type(command).__name__}")

    async def _state_write_failed(self, exc: StateWriteFailed, store: str = "continuity") -> None:
        """Logged, counted and audited; the finished answer still goes out."""
        agent = self.ctx.agent.agent.id
        log.warning("request %s: %s", self.ctx.request_id, exc)
        self.state.metrics.state_write_failures.labels(store=store).inc()
        record = {"event": "state_write_failed", "request": self.ctx.request_id, "error": str(exc)}
        try:
            await self.state.audit.append(agent, {**record, "store": store})
        except Exception:
            log.exception("audit of a failed state write of %s failed", self.ctx.request_id)

    async def _model_turn(self, command: CallModel) -> Event:
        """A resumed attempt replays the turns its earlier attempt journaled (same calls, same
        ids); past them, the model is asked."""
        replayed = self.attempt.replayed_turn()
        if replayed is not None:
            # Its tokens were spent by the earlier attempt, not by this one.
            return ModelReplied({k: v for k, v in replayed.items() if k != "usage"})
        try:
            await self.attempt.flush()  # the results this call carries, durably first
        except OSError as exc:
            await self._state_write_failed(StateWriteFailed(str(exc)), "journal")
        if self.live is not None:
            event = await self._keeping_alive(self._call_model_live(command, self.live))
        else:
            event = await self._keeping_alive(self._call_model(command))
        if isinstance(event, ModelReplied):
            self.attempt.model_replied(event.body)
            self.ctx.record_objects(refs(self.codec.stored_ids(event.body)))
            self._charge(command.body, event.body)
        return event

    def _charge(self, request: dict[str, Any], reply: dict[str, Any]) -> None:
        """One model call's cost at the price of the provider that answered it; a provider
        that reported no usage is charged an estimate (#32), kept for the audit record."""
        usage = reply.get("usage")
        read, creation = self.codec.cache_counts(usage)
        tokens = self.codec.usage_counts(usage)
        if not any(tokens):
            tokens = (
                len(orjson.dumps(request)) // BYTES_PER_TOKEN,
                len(orjson.dumps(reply)) // BYTES_PER_TOKEN,
            )
            self.estimated = (self.estimated[0] + tokens[0], self.estimated[1] + tokens[1])
        call = usage_record(*tokens, cache_read=read, cache_creation=creation)
        cost = call_cost(self.ctx, self.ctx.provider_name, self.ctx.model, call)
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost

    async def _call_model(self, command: CallModel) -> Event:
        with tracing.model_span(self.codec.api, self.ctx.model) as span:
            event = await self._call_model_once(command)
            if isinstance(event, ModelReplied):
                tracing.record_usage(span, *self.codec.usage_of_body(event.body))
            elif isinstance(event, ModelFailed):
                tracing.record_error(
                    span, event.kind if event.status is None else str(event.status)
                )
            return event

    async def _call_model_once(self, command: CallModel) -> Event:
        if self.ctx.translations is not None:  # a target of another protocol (contract §18)
            return await translated.call_model(self.ctx, command)
        started = time.perf_counter()
        upstream = self.state.upstream

        def send(target: UpstreamTarget, model: str | None) -> Awaitable[Response]:
            body = command.body
            if model is not None and model != body.get("model"):  # a fallback's own id
                body = {**body, "model": model}
            return upstream.send(
                target,
                orjson.dumps(body),
                timeout_s=command.timeout_s,
                max_body_bytes=upstream.max_response_bytes,
            )

        try:
            reply = await read_whole(await open_upstream(self.ctx, send), self.ctx.provider_name)
        except UpstreamError as exc:
            return ModelFailed(exc.kind, exc.message)
        except ApiError as err:  # every key rests
            return ModelFailed("status", err.message, err.status, err.headers.get("retry-after"))
        finally:
            self.state.metrics.observe_upstream(
                self.ctx.provider_name, time.perf_counter() - started
            )
        if reply.status != 200:
            body = self.state.upstream.redact(self.ctx.provider_name, reply.body)
            unserved = not_served_message(self.codec, self.ctx.provider_name, reply.status, body)
            if unserved:
                return ModelFailed(NOT_SERVED, unserved)
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
        """The upstream streams too; text reaches the client as it arrives (SPEC §8.1). A
        provider that cannot stream with tools is called whole, its text re-streamed."""

        async def show(head: dict[str, Any], deltas: list[TextDelta]) -> None:
            await self._write(live.text(head, deltas))

        support = self.state.stream_tools
        provider = self.ctx.provider_name
        assert provider is not None
        if not support.streams(provider, command.body):
            event = await self._call_model_restreamed(command, show)
        else:
            may_fall_back = support.may_fall_back(provider) and offers_tools(command.body)
            streamed = await self._stream_model(command, show, may_fall_back)
            if isinstance(streamed, StreamUnanswered):
                # Nothing was shown and no call was made: this round is asked again, whole.
                event = await self._call_model_restreamed(command, show)
                if streamed.definitive or isinstance(event, ModelReplied):
                    support.learn_cannot(provider, streamed.why)
            else:
                event = streamed
        if isinstance(event, ModelReplied):
            await self._write(live.end_turn(event.body))
        return event

    async def _call_model_restreamed(self, command: CallModel, show: Show) -> Event:
        """A whole call; a streaming client still gets its text, in one piece."""
        event = await self._call_model(command)
        if isinstance(event, ModelReplied):
            await show_whole(self.codec, self.engine.conversation, event.body, show)
        return event

    async def _stream_model(
        self, command: CallModel, show: Show, may_fall_back: bool
    ) -> Event | StreamUnanswered:
        started = time.perf_counter()
        with tracing.model_span(self.codec.api, self.ctx.model) as span:
            try:
                event = await call_model_streaming(
                    self.ctx,
                    self.codec,
                    self.engine.conversation,
                    command.body,
                    command.timeout_s,
                    show,
                    may_fall_back=may_fall_back,
                )
            finally:
                self.state.metrics.observe_upstream(
                    self.ctx.provider_name, time.perf_counter() - started
                )
            if isinstance(event, ModelReplied):
                tracing.record_usage(span, *self.codec.usage_of_body(event.body))
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
        key = call_key(execution.checked.tool, execution.call)
        known = self.attempt.known_outcome(key)
        if known is not None:  # answered (or sent) by the attempt this one resumes
            self.replayed_calls.add(execution.call.id)
            return known
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return refused("timeout", "the request's total time budget ran out before this call")
        agent = self.ctx.agent.agent.id
        side_effects = has_side_effects(execution.checked.tool)
        unjournaled: list[OSError] = []

        async def journal_sending() -> None:
            """After policy and approval, before the call goes: without this record a retry
            could send it again, so a failed write stops it."""
            try:
                await self.attempt.sending(key)
            except OSError as exc:
                unjournaled.append(exc)
                raise _NotJournaled from exc

        try:
            limits = CallLimits(
                timeout_s=min(command.timeout_s, remaining),
                max_result_bytes=command.max_result_bytes,
                idempotency_key=idempotency_key(
                    self.state.config.pod, agent, execution.checked, self.attempt.lineage
                )
                if side_effects
                else None,
            )
            outcome = await self.state.governed.execute(
                agent,
                execution.checked,
                limits,
                taint=command.taint,
                deadline=deadline,
                before_send=journal_sending if side_effects else None,
            )
        except _NotJournaled:
            await self._state_write_failed(StateWriteFailed(str(unjournaled[0])), "journal")
            return refused("state_unavailable", "the sidecar could not journal this call")
        except Exception:
            log.exception("tool %s failed in the executor", execution.checked.tool.name)
            return refused("execution_failed", "the sidecar could not execute this call")
        self.attempt.answered(key, outcome)  # durable before the next model call uses it
        return outcome

    async def _end_attempt(self) -> None:
        try:
            await self.attempt.end(succeeded=self.error_code is None)
        except OSError as exc:
            await self._state_write_failed(StateWriteFailed(str(exc)), "journal")

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
            # Messages carry provider text (an error body, a stream's error event): no key in
            # any encoding leaves with them.
            message = self.state.upstream.redact_text(self.ctx.provider_name, command.message)
            err = ApiError(command.status, command.code, message)
            if self.live is not None:
                await self._write(self.live.fail(err))
            else:
                status, body = command.status, self.codec.error_json(err)
                if command.code in SIDECAR_DECIDED or self._side_effect_happened():
                    headers = FINAL_HEADERS
                elif command.retry_after:
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

    def _side_effect_happened(self) -> bool:
        """A tool that is neither read-only nor idempotent ran in this request (SPEC 8.2)."""
        return any(
            answered.outcome.executed
            and answered.tool is not None
            and has_side_effects(answered.tool)
            for calls in self.engine.rounds
            for answered in calls
        )

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
        cache_read, cache_creation = self.codec.cache_counts(engine.usage.fields)
        usage = usage_record(
            engine.usage.input_tokens + self.estimated[0],
            engine.usage.output_tokens + self.estimated[1],
            engine.executed_rounds,
            cache_read=cache_read,
            cache_creation=cache_creation,
        )
        if any(self.estimated):
            usage["estimated"] = True
        try:
            await record_request(
                self.ctx,
                http_status=self.http_status,
                error_code=self.error_code,
                usage=usage,
                tool_trace=self._scrubbed(_tool_trace(engine, self.replayed_calls)),
                extra=self._resume_record(),
                cost=self.cost,
            )
        except Exception:
            log.exception("audit of mediated request %s failed", self.ctx.request_id)

    def _scrubbed(self, value: Any) -> Any:
        """What is kept of the request, without the credentials or tokens a call of it was
        refused for carrying (SPEC §17): the model sent them, the sidecar does not store them."""
        guard = self.state.governed.argument_guard
        refused = any(
            answered.outcome.error_code == TAINTED_ARGUMENT
            for calls in self.engine.rounds
            for answered in calls
        )
        return guard.scrubbed(value) if guard is not None and refused else value

    def _resume_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"hidden_rounds_restored": self.engine.restored_rounds}
        if self.attempt.resumed_from:
            record["resumed_from"] = self.attempt.resumed_from
        if self.engine.taint.tainted:
            record["taint_sources"] = list(self.engine.taint.sources)
        return record


def _tool_trace(engine: MediationEngine, replayed: set[str]) -> list[dict[str, Any]]:
    """The audit record's rounds: every call answered, rendered as MCP calls are. A call whose
    answer came from the journal of an earlier attempt is ``replayed``, not executed again (its
    latency is that attempt's)."""
    return [
        {
            "round": number,
            "calls": [
                _replayed(trace_call(a.call.id, a.tool, a.call.name, a.call.arguments, a.outcome))
                if a.call.id in replayed
                else trace_call(a.call.id, a.tool, a.call.name, a.call.arguments, a.outcome)
                for a in calls
            ],
        }
        for number, calls in enumerate(engine.rounds, 1)
    ]


def _replayed(call: dict[str, Any]) -> dict[str, Any]:
    return call | {"executed": False, "replayed": True, "latency_ms": 0.0}
