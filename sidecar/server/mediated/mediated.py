"""The driver of the mediation engine: it performs each command and sends the engine its event.

The I/O it performs lives beside it: the model call and the client's stream and answer
(``model_call.py``), exactly-once around model calls and tool rounds (``exactly_once.py``, the
one place the journal is met; for an agent without side effects, ``tool_round.py``) and the
audit record (``accounting.py``), written exactly once at the end, also when the client went
away in the middle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from ...mediation.commands import (
    BeginStream,
    CallModel,
    Command,
    Done,
    Event,
    ExecuteTools,
    Fail,
    Recall,
    Recalled,
    Remember,
    Respond,
)
from ...mediation.engine import MediationEngine
from ...state.continuity import StateWriteFailed
from ..accounting.accounting import record_mediated, report_state_write_failure, scrubbed
from ..request.exchange import Exchange
from .exactly_once import ExactlyOnce, begin_attempt, side_effect_ran
from .model_call import CLIENT_CLOSED, MediatedClient, ModelCalls
from .tool_round import Unjournaled

if TYPE_CHECKING:
    from ..request.exchange import RequestContext

log = logging.getLogger(__name__)
Once = ExactlyOnce | Unjournaled


async def handle_mediated(exchange: Exchange, ctx: RequestContext, body: dict[str, Any]) -> None:
    state = ctx.state
    plan = state.governed.plans[ctx.caller.agent.agent.id]
    quarantine = state.executor.quarantine if plan.may_drift else None  # drift: not offered
    assert ctx.ledger.provider_name is not None
    provider = state.config.providers[ctx.ledger.provider_name]
    engine = MediationEngine(
        ctx.caller.codec,
        quarantine.offered(ctx.caller.agent) if quarantine else ctx.caller.agent,
        body,
        check=state.executor.check,
        # Each model call: its provider's timeout-ms, within the sidecar's upstream bound.
        model_timeout_s=min(provider.timeout_ms, state.config.upstream_timeout_ms) / 1000,
        withheld=quarantine.withheld(ctx.caller.agent) if quarantine else (),
        taint_mode=state.config.taint.mode if state.config.taint is not None else "off",
        untrusted=plan.untrusted,
        end_user=ctx.caller.end_user,
    )
    for _ in engine.prepared_in_slices():  # other requests run between a long one's slices
        await asyncio.sleep(0)
    journaled = plan.side_effects  # a tool with side effects: exactly once (exactly_once.py)
    once = await begin_attempt(ctx, plan, engine, body) if journaled else Unjournaled(ctx, plan)
    # Its own task: a cancelled handler must not cut a loop (and its audit) short.
    await state.tasks.run(_Driver(exchange, ctx, engine, once).run())


class _Driver:
    def __init__(
        self, exchange: Exchange, ctx: RequestContext, engine: MediationEngine, once: Once
    ) -> None:
        self.ctx = ctx
        self.engine = engine
        self.once = once
        self.client = MediatedClient(exchange, ctx, ctx.caller.codec)
        self.model = ModelCalls(ctx, engine, self.client)
        self.http_status = 200
        self.error_code: str | None = None

    async def run(self) -> None:
        steps = self.engine.run()
        try:
            command: Command = next(steps)
            while not isinstance(command, Respond | Fail):
                if isinstance(command, CallModel | ExecuteTools) and self.client.left():
                    self.http_status, self.error_code = CLIENT_CLOSED, "client_disconnected"
                    break
                command = steps.send(await self._perform(command))
            else:
                await self._reply(command)
        except Exception:
            log.exception("mediated request %s failed", self.ctx.caller.request_id)
            await self._reply(Fail.internal())
        finally:
            steps.close()
        await self.once.end(succeeded=self.error_code is None)
        once, charges, outcome = self.once, self.model.charges, (self.http_status, self.error_code)
        await record_mediated(
            self.ctx, self.engine, charges, once.replayed_calls, once.resumed_from, outcome
        )

    async def _perform(self, command: Command) -> Event:
        if isinstance(command, CallModel | ExecuteTools):
            performing = self._call_out(command)
            return await (self.client.keeping_alive(performing) if self.client.live else performing)
        if isinstance(command, BeginStream):
            await self.client.begin_stream(
                self.ctx.caller.codec.client_stream(self.engine.conversation)
            )
        elif isinstance(command, Recall):
            return Recalled(self.ctx.state.continuity.candidates(command.keys))
        elif isinstance(command, Remember):
            await self._remember(command)
        else:
            raise TypeError(f"unknown command {type(command).__name__}")
        return Done()

    def _call_out(self, command: CallModel | ExecuteTools) -> Awaitable[Event]:
        if isinstance(self.once, ExactlyOnce):
            return self.once.perform(command, self.model)
        return self.model(command) if isinstance(command, CallModel) else self.once.run(command)

    async def _remember(self, command: Remember) -> None:
        """state-durability (issue 14.5): a failed state write never costs the answer."""
        try:
            self.ctx.state.continuity.remember(
                command.keys,
                scrubbed(self.ctx, self.engine, command.messages),
                agent=self.ctx.caller.agent.agent.id,
                context=command.context,
                origin=command.origin,
                taint_sources=command.taint_sources,
            )
        except StateWriteFailed as exc:
            await report_state_write_failure(self.ctx, exc, "continuity")

    async def _reply(self, command: Respond | Fail) -> None:
        once = self.once
        if isinstance(command, Fail):
            self.http_status, self.error_code = command.status, command.code
            # Durable before the client holds the error: an instant retry finds the link.
            await once.end(succeeded=False)
        ran = isinstance(once, ExactlyOnce) and side_effect_ran(self.engine, once.plan)
        await self.client.reply(command, ran)
        if self.client.gone and self.error_code is None:
            # The answer was ready but nobody was there to receive it.
            self.http_status, self.error_code = CLIENT_CLOSED, "client_disconnected"
