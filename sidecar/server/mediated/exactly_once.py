"""Exactly-once for a mediated request (SPEC §8.2): the one place the driver meets the journal.

:func:`begin_attempt` starts the request's attempt (after an identical one still running here
has ended; resuming what a failed one left). :meth:`ExactlyOnce.perform` wraps performing the
engine's ``CallModel`` and ``ExecuteTools``: a resumed attempt replays the turns its earlier
attempt journaled and reuses the outcomes it journaled; a new turn is journaled before any call
it asks for with side effects, each such call before it is sent (a failed write stops it), and
each answer is synced before the next model call carries it (SPEC §8.2: durable before the
result is used; requests running at once share the sync).
:meth:`ExactlyOnce.end` keeps or drops the journal as the attempt ended.

An agent none of whose tools has side effects never meets the journal (its ``CallPlan`` says
so; ``tool_round.py`` runs its rounds): nothing of its requests is ever journaled (read-only and
idempotent calls are safe to run again), so there is nothing to resume and no identical attempt
to wait for, and its requests skip the identities and the journal's look-up that every other
mediated request pays. A call no governance step applies to goes to the executor straight here
too, journaled first when it has side effects (:func:`.tool_round.run_call`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...backends.http import idempotency_key
from ...execution.executor import CallLimits
from ...mediation.commands import (
    CallModel,
    Event,
    ExecuteTools,
    ModelReplied,
    PlannedExecution,
)
from ...mediation.engine import MediationEngine
from ...model.conversation import ToolOutcome, refused
from ...model.end_user import owner_of
from ...state.continuity import StateWriteFailed
from ...state.journal import Attempt, call_key, identities
from ..accounting.accounting import report_state_write_failure
from .tool_round import run_call, run_round

if TYPE_CHECKING:
    from ...governance.gate import CallPlan
    from ..request.exchange import RequestContext

log = logging.getLogger(__name__)

AskModel = Callable[[CallModel], Awaitable[Event]]


class _NotJournaled(Exception):
    """The journal could not record a call about to be sent: it is not sent."""


async def begin_attempt(
    ctx: RequestContext, plan: CallPlan, engine: MediationEngine, body: dict[str, Any]
) -> ExactlyOnce:
    """For an agent with a tool with side effects (``plan.side_effects``). An identical request
    still running waits here; a failed one is resumed. A request is identified by its
    conversation (and its end user: one user's request is never another's retry, SPEC §21);
    one the codec cannot read, by its bytes."""
    agent = ctx.caller.agent.agent.id
    conversation = engine.conversation if engine.prepare() is None else None
    request, rewrite = identities(
        owner_of(agent, ctx.caller.end_user), ctx.caller.codec.api, conversation, body
    )
    attempt = await ctx.state.journal.begin(agent, request, ctx.caller.request_id, rewrite)
    return ExactlyOnce(ctx, plan, attempt)


def side_effect_ran(engine: MediationEngine, plan: CallPlan) -> bool:
    """A tool that is neither read-only nor idempotent ran in this request: a failure after it
    tells the runner not to retry (SPEC 8.2)."""
    return any(
        answered.outcome.executed
        and answered.tool is not None
        and answered.tool.name not in plan.repeatable
        for calls in engine.rounds
        for answered in calls
    )


class ExactlyOnce:
    """One attempt of a mediated request, around the commands that call out."""

    def __init__(self, ctx: RequestContext, plan: CallPlan, attempt: Attempt) -> None:
        self.ctx = ctx
        self.plan = plan
        self.attempt = attempt
        self.replayed_calls: set[str] = set()
        """Ids of calls answered from the journal of the attempt this one resumes."""

    @property
    def resumed_from(self) -> str | None:
        return self.attempt.resumed_from

    def perform(self, command: CallModel | ExecuteTools, ask_model: AskModel) -> Awaitable[Event]:
        """What performs ``command`` (not a coroutine of its own: each of the model call's and
        the round's suspensions would pass through it)."""
        if isinstance(command, CallModel):
            return self._model_turn(command, ask_model)
        # The turns asking for it go with the first call with side effects (_run_one).
        self.attempt.before_execution(
            any(e.checked.tool.name not in self.plan.repeatable for e in command.executions)
        )
        return run_round(command, self._run_one)

    async def end(self, *, succeeded: bool) -> None:
        try:
            await self.attempt.end(succeeded=succeeded)
        except OSError as exc:
            await report_state_write_failure(self.ctx, StateWriteFailed(str(exc)), "journal")

    async def _model_turn(self, command: CallModel, ask_model: AskModel) -> Event:
        """Past the turns an earlier attempt journaled (same calls, same ids), the model is
        asked."""
        replayed = self.attempt.replayed_turn()
        if replayed is not None:
            # Its tokens were spent by the earlier attempt, not by this one.
            return ModelReplied({k: v for k, v in replayed.items() if k != "usage"})
        try:
            # The results this call carries are durable before the model sees them (SPEC §8.2).
            await self.attempt.flush()
        except OSError as exc:
            await report_state_write_failure(self.ctx, StateWriteFailed(str(exc)), "journal")
        event = await ask_model(command)
        if isinstance(event, ModelReplied):
            self.attempt.model_replied(event.body)
        return event

    async def _run_one(
        self, command: ExecuteTools, execution: PlannedExecution, deadline: float
    ) -> ToolOutcome:
        attempt = self.attempt
        key = call_key(execution.checked.tool, execution.call)
        known = attempt.known_outcome(key)
        if known is not None:  # answered (or sent) by the attempt this one resumes
            self.replayed_calls.add(execution.call.id)
            return known
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return refused("timeout", "the request's total time budget ran out before this call")
        resumed = attempt.resumed_task(key)
        if resumed is not None:  # sent by the attempt this one resumes, a task at its service
            self.replayed_calls.add(execution.call.id)
            return await self._poll_resumed(command, execution, key, resumed, remaining)
        side_effects = execution.checked.tool.name not in self.plan.repeatable
        unjournaled: list[OSError] = []

        async def journal_sending() -> None:
            """After policy and approval, before the call goes: without this record a retry
            could send it again, so a failed write stops it."""
            try:
                await attempt.sending(key)
            except OSError as exc:
                unjournaled.append(exc)
                raise _NotJournaled from exc

        async def journal_task(task_id: str) -> None:
            """The service runs the call as a task: a retry after a crash polls it."""
            try:
                await attempt.task_started(key, task_id)
            except OSError:  # the call goes on; a crash now leaves its outcome unknown
                log.exception("the task of tool %s was not journaled", execution.checked.tool.name)

        try:
            limits = CallLimits(
                timeout_s=min(command.call_timeout_s(execution), remaining),
                max_result_bytes=command.max_result_bytes,
                idempotency_key=idempotency_key(
                    self.ctx.state.config.pod,
                    self.ctx.caller.agent.agent.id,
                    execution.checked,
                    attempt.lineage,
                )
                if side_effects
                else None,
                task_started=journal_task if side_effects else None,
            )
            before_send = journal_sending if side_effects else None
            outcome = await run_call(
                self.ctx, self.plan, command, execution, limits, deadline, before_send
            )
        except _NotJournaled:
            failure = StateWriteFailed(str(unjournaled[0]))
            await report_state_write_failure(self.ctx, failure, "journal")
            return refused("state_unavailable", "the sidecar could not journal this call")
        except Exception:
            log.exception("tool %s failed in the executor", execution.checked.tool.name)
            return refused("execution_failed", "the sidecar could not execute this call")
        attempt.answered(key, outcome)  # durable before the next model call uses it
        return outcome

    async def _poll_resumed(
        self,
        command: ExecuteTools,
        execution: PlannedExecution,
        key: str,
        task_id: str,
        remaining: float,
    ) -> ToolOutcome:
        """The outcome of a call the resumed attempt sent, polled from the task its MCP service
        runs it as: it passed the gate then, and it is never sent again (§8.2)."""
        limits = CallLimits(
            timeout_s=min(command.call_timeout_s(execution), remaining),
            max_result_bytes=command.max_result_bytes,
            resumed_task=task_id,
        )
        ctx = self.ctx
        try:
            outcome = await ctx.state.executor.execute(
                ctx.caller.agent.agent.id,
                execution.checked,
                limits,
                shielded=True,
                end_user=ctx.caller.end_user,
            )
        except Exception:
            log.exception("tool %s failed in the executor", execution.checked.tool.name)
            return refused("execution_failed", "the sidecar could not poll this call's task")
        self.attempt.answered(key, outcome)
        return outcome
