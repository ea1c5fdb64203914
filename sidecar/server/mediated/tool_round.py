"""The tool rounds of an agent none of whose tools has side effects (SPEC §8.2): its calls are
safe to run again, so nothing of its requests is journaled, resumed or waited for, and
:class:`Unjournaled` runs its rounds as ``ExactlyOnce`` (``exactly_once.py``) runs every other
agent's, without the journal (its model calls need nothing of either). Both run each call
with :func:`run_call`: a call no governance step applies to (``CallPlan``) goes to the executor
straight; every other call passes the gate."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ...execution.executor import CallLimits, ToolExecutor
from ...governance.gate import CallPlan
from ...mediation.commands import ExecuteTools, PlannedExecution, ToolsDone
from ...model.conversation import CheckedCall, ToolOutcome, refused
from ...model.end_user import EndUser

if TYPE_CHECKING:
    from ..request.exchange import RequestContext

log = logging.getLogger(__name__)

RunCall = Callable[[ExecuteTools, PlannedExecution, float], Awaitable[ToolOutcome]]
"""One call of a round: the command, the call, and the round's deadline (monotonic)."""


async def run_round(command: ExecuteTools, run_call: RunCall) -> ToolsDone:
    """A round's calls within its time budget, at once where the command allows it."""
    started = time.monotonic()
    deadline = started + command.budget_s
    runs = (run_call(command, e, deadline) for e in command.executions)
    if command.concurrent and len(command.executions) > 1:
        outcomes = list(await asyncio.gather(*runs))
    else:
        outcomes = [await run for run in runs]
    return ToolsDone(outcomes, elapsed_s=time.monotonic() - started)


class Unjournaled:
    """``ExactlyOnce``'s part for an agent whose calls are all safe to repeat."""

    replayed_calls: frozenset[str] = frozenset()
    resumed_from: str | None = None

    def __init__(self, ctx: RequestContext, plan: CallPlan) -> None:
        self.ctx = ctx
        self.plan = plan

    async def run(self, command: ExecuteTools) -> ToolsDone:
        return await run_round(command, self._run_call)

    async def end(self, *, succeeded: bool) -> None:
        """Nothing was journaled: nothing to keep or drop."""

    async def _run_call(
        self, command: ExecuteTools, execution: PlannedExecution, deadline: float
    ) -> ToolOutcome:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return refused("timeout", "the request's total time budget ran out before this call")
        limits = CallLimits(
            min(command.call_timeout_s(execution), remaining), command.max_result_bytes
        )
        try:
            return await run_call(self.ctx, self.plan, command, execution, limits, deadline)
        except Exception:
            log.exception("tool %s failed in the executor", execution.checked.tool.name)
            return refused("execution_failed", "the sidecar could not execute this call")


def run_call(
    ctx: RequestContext,
    plan: CallPlan,
    command: ExecuteTools,
    execution: PlannedExecution,
    limits: CallLimits,
    deadline: float,
    before_send: Callable[[], Awaitable[None]] | None = None,
) -> Awaitable[ToolOutcome]:
    """One call through the gate, or, when no step of it applies (the agent's ``CallPlan``,
    an untainted request), to the executor straight; ``before_send`` is awaited right before
    it is sent (the journal's ``sent`` line, after any approval)."""
    state, agent, call = ctx.state, ctx.caller.agent.agent.id, execution.checked
    if not command.taint.tainted and call.tool.name in plan.ungoverned:
        # No step of the gate applies to this call: the executor makes it.
        if before_send is None:
            return state.executor.execute(
                agent, call, limits, shielded=True, end_user=ctx.caller.end_user
            )
        return _sent_after(before_send, state.executor, agent, call, limits, ctx.caller.end_user)
    return state.governed.execute(
        agent,
        call,
        limits,
        taint=command.taint,
        deadline=deadline,
        before_send=before_send,
        client=execution.client,
        shielded=True,  # the driver runs as a task of its own (server/mediated/mediated.py)
        end_user=ctx.caller.end_user,
    )


async def _sent_after(
    before_send: Callable[[], Awaitable[None]],
    executor: ToolExecutor,
    agent: str,
    call: CheckedCall,
    limits: CallLimits,
    end_user: EndUser | None,
) -> ToolOutcome:
    await before_send()
    return await executor.execute(agent, call, limits, shielded=True, end_user=end_user)
