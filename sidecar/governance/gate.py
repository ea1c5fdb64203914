"""The governed tool call, shared by mediated mode and MCP (SPEC §9): permission (grant) →
argument guards of a tainted request (§17) → rules (CEL) → rate limit → approval (also the
hold of a tainted request) → quarantine (a tool whose definition drifted since it was offered,
§11.2) → timeout and dispatch (the executor) → the fence around an untrusted result. The
arguments come checked (:class:`CheckedCall`). The call sites audit the outcome; refused
calls come back as error results the model sees."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from ..audit.log import AuditLog
from ..backends.quarantine import Quarantine, may_drift
from ..execution.executor import ArgumentCheck, CallLimits, ToolExecutor, ToolRunner
from ..manifest import (
    AgentBuild,
    Approvals,
    Effect,
    Governance,
    ManagedTool,
    Rate,
    Taint,
)
from ..model.client_approval import ClientApproval
from ..model.conversation import CheckedCall, ToolOutcome, refused
from ..model.end_user import EndUser
from ..model.rules import UNTAINTED_REQUEST, tool_matches
from ..model.taint import (
    TAINTED,
    UNTAINTED,
    RequestTaint,
    fenced,
    held_when_tainted,
)
from ..observability.metrics import Metrics
from ..state.approvals import Approval, ApprovalStore, Decision, open_approval
from ..state.counters import SHARED_LIMITS_UNAVAILABLE, RateCounters, SharedLimitsUnavailable
from ..state.journal import has_side_effects
from ..tasks import ShieldedTasks
from .approval_waits import ApprovalWaits
from .client_answer_check import ClientApprovals, asks_client
from .policy import Decision as RuleDecision
from .policy import Policy
from .rates import RateLimiter
from .taint_guard import ArgumentGuard
from .webhooks import ApprovalWebhook

log = logging.getLogger(__name__)


def needs_approval(approvals: Approvals, tool: ManagedTool) -> bool:
    """The pod's ``approvals.require``, by the tool's effect."""
    require = approvals.require
    if isinstance(require, list):
        return any(tool_matches(pattern, tool.name) for pattern in require)
    if require == "destructive":
        return tool.effect is Effect.DESTRUCTIVE
    if require == "non-read-only":
        return tool.effect is not Effect.READ_ONLY
    return False


@dataclass(frozen=True, slots=True)
class CallPlan:
    """What the tool calls of one agent can need, decided once when the sidecar starts: a
    request of the agent reads it instead of entering each step to learn it does nothing."""

    ungoverned: frozenset[str]
    """Names of the agent's tools no step of :meth:`GovernedExecutor.execute` applies to while
    the request is untainted: no rule names them, no approval is required, their output is
    trusted and their definition is never quarantined. Such a call may go to the executor
    straight (``GovernedExecutor.executor``)."""
    may_drift: bool
    """Some tool's definition is checked against its pin: some may be quarantined."""
    side_effects: bool
    """Some tool is neither read-only nor idempotent: the agent's requests meet the journal."""
    repeatable: frozenset[str]
    """Names of the agent's tools that are read-only or idempotent: the journal reads this
    instead of asking each called tool; a call of any other tool is journaled (SPEC §8.2)."""
    untrusted: frozenset[str]
    """Names of the tools whose results are open-world content that taints a request (§17):
    the engine reads this instead of asking each called tool after every round."""


class GovernedExecutor(ToolRunner):
    def __init__(
        self,
        executor: ToolExecutor,
        governance: Governance | None,
        agents: Mapping[str, AgentBuild],
        approvals: ApprovalStore,
        *,
        manifest_digest: str,
        audit: AuditLog,
        metrics: Metrics,
        tasks: ShieldedTasks,
        webhook: ApprovalWebhook | None = None,
        taint: Taint | None = None,
        credentials: tuple[str, ...] = (),
        rates: RateCounters | None = None,
    ) -> None:
        """``taint``: the pod's settings (SPEC §17); ``credentials``: every secret value the
        sidecar holds, which a tainted request's arguments may not carry; ``rates``: where
        rate buckets are counted (default: in this sidecar's memory)."""
        self.executor = executor
        self.policy = Policy(governance)
        self.rates = RateLimiter(rates)
        self.approvals = approvals
        self.waits = ApprovalWaits(approvals)
        self.settings = governance.approvals if governance is not None else Approvals()
        self.manifest_digest = manifest_digest
        self.client_approvals = ClientApprovals(
            approvals,
            self.settings,
            manifest_digest=manifest_digest,
            audit=audit,
            metrics=metrics,
            record=self._record,
        )
        self._granted = {
            agent_id: {tool.name: tool for tool in build.tools.tools}
            for agent_id, build in agents.items()
        }
        self._audit = audit
        self._metrics = metrics
        self._tasks = tasks
        self.webhook = webhook
        self.taint_mode = taint.mode if taint is not None else "off"
        self.argument_guard = (
            ArgumentGuard(taint, agents, credentials) if self.taint_mode != "off" else None
        )
        self.plans = {agent_id: self._plan(agent_id, build) for agent_id, build in agents.items()}

    def _plan(self, agent_id: str, build: AgentBuild) -> CallPlan:
        tools = build.tools.tools
        ungoverned = [
            tool
            for tool in tools
            if not self.policy.governs(agent_id, tool)
            and not needs_approval(self.settings, tool)
            and not tool.untrusted
            and not may_drift(tool)
        ]
        return CallPlan(
            ungoverned=frozenset(tool.name for tool in ungoverned),
            may_drift=any(map(may_drift, tools)),
            side_effects=any(map(has_side_effects, tools)),
            repeatable=frozenset(tool.name for tool in tools if not has_side_effects(tool)),
            untrusted=frozenset(tool.name for tool in tools if tool.untrusted),
        )

    @property
    def quarantine(self) -> Quarantine:
        """Tools whose definition drifted from their pin: not offered, and refused here."""
        return self.executor.quarantine

    @property
    def check(self) -> ArgumentCheck:
        """The one argument check whose :class:`CheckedCall` this gate takes."""
        return self.executor.check

    async def execute(
        self,
        agent_id: str,
        call: CheckedCall,
        limits: CallLimits,
        *,
        taint: RequestTaint = UNTAINTED,
        deadline: float | None = None,
        before_send: Callable[[], Awaitable[None]] | None = None,
        client: ClientApproval | None = None,
        shielded: bool = False,
        end_user: EndUser | None = None,
        on_hold: Callable[[str], None] | None = None,
    ) -> ToolOutcome:
        """``taint``: the untrusted results that entered the calling request (mediated mode);
        ``deadline`` (``time.monotonic()``): the caller's budget, which an approval's wait
        never outlives; ``before_send``: awaited once the call is cleared to go, right before
        it is sent (the mediated journal records it there, after any approval); ``client``:
        given when the caller's client can answer approvals itself (SPEC §16); ``shielded``:
        the caller runs in a task nobody cancels (see :meth:`ToolExecutor.execute`);
        ``end_user``: the verified person the agent works for (SPEC §21), for the backends;
        ``on_hold``: told the approval's id when the call starts waiting for an operator (an
        MCP task shows it, SPEC §22)."""
        tool = call.tool
        # By name, so a copy of the granted tool is granted; another tool of its name is not.
        granted = self._granted.get(agent_id, {}).get(tool.name)
        if granted is not tool and granted != tool:
            return refused("policy_denied", f"{tool.presented} is not granted to this agent")
        checked = call.arguments
        guard = self.argument_guard
        if taint.tainted and guard is not None:
            refusal = guard.refusal(tool, checked)
            if refusal is not None:
                return refusal
        # `withdraw` is the engine's: it never offers (nor runs) those tools again.
        held = taint.tainted and self.taint_mode == "confirm" and held_when_tainted(tool)
        request = taint.variables() if taint.tainted else UNTAINTED_REQUEST
        decision = self.policy.decide(agent_id, tool, checked, request)
        if decision.effect == "deny":
            return refused("policy_denied", decision.reason)
        # The user answers a call held by a client rule where the client can (SPEC §16); the
        # answer resumes a call its question already admitted.
        asks = client if client is not None and self._client_decides(decision, held, tool) else None
        if (
            decision.rate is not None
            and decision.rule is not None
            and not (asks is not None and asks.answer is not None)
        ):
            refusal = await self._rate_refusal(agent_id, tool, decision.rule, decision.rate)
            if refusal is not None:
                return refusal
        if held or decision.effect == "confirm" or needs_approval(self.settings, tool):
            # A rule cannot lift the hold of a tainted request; `taint: off` does.
            reason = TAINTED if held else None
            # No operator (nor user) is asked about a call that could not be made.
            refusal = self.quarantine.refusal(tool.name)
            if refusal is None and asks is not None:
                refusal = await self.client_approvals.settle(agent_id, call, asks, decision)
            elif refusal is None:
                refusal = await self._approved(
                    agent_id, call, decision, reason, deadline, end_user, on_hold
                )
            if refusal is not None:
                return refusal
        # Quarantined tools are left out when tools are offered (the engine refuses a call of
        # one); a tool quarantined since, even while its call waited for an operator, is
        # refused here, right before the call would leave.
        refusal = self.quarantine.refusal(tool.name)
        if refusal is not None:
            return refusal
        if deadline is not None:
            timeout_s = min(limits.timeout_s, deadline - time.monotonic())
            if timeout_s <= 0:
                return refused("timeout", "the request's tool budget ran out before this call")
            limits = dataclasses.replace(limits, timeout_s=timeout_s)
        if before_send is not None:
            await before_send()
        outcome = await self.executor.execute(
            agent_id, call, limits, shielded=shielded, end_user=end_user
        )
        return fenced(outcome) if tool.untrusted and outcome.executed else outcome

    async def _rate_refusal(
        self, agent_id: str, tool: ManagedTool, rule: int, rate: Rate
    ) -> ToolOutcome | None:
        try:
            if await self.rates.admit(agent_id, tool.name, rule, rate):
                return None
        except SharedLimitsUnavailable:
            return refused(
                SHARED_LIMITS_UNAVAILABLE,
                f"{tool.presented} is rate limited and the pod's shared limits cannot be "
                "checked now; try again shortly",
            )
        return refused(
            "rate_limited",
            f"{tool.presented} is limited to {rate.count} calls per {rate.per} for this "
            "agent; try again later",
        )

    # -- approvals --------------------------------------------------------------------------

    def _client_decides(self, decision: RuleDecision, held: bool, tool: ManagedTool) -> bool:
        """Only a confirm rule naming the client hands the call to the user: a tainted hold or
        the pod's ``approvals.require`` stay with the operator."""
        return asks_client(decision) and not held and not needs_approval(self.settings, tool)

    async def _approved(
        self,
        agent_id: str,
        call: CheckedCall,
        held_by: RuleDecision,
        reason: str | None,
        deadline: float | None,
        end_user: EndUser | None,
        on_hold: Callable[[str], None] | None = None,
    ) -> ToolOutcome | None:
        """None once an operator approved this exact call for this end user; else the refusal
        the model sees. ``reason``: why a new approval is asked for (``tainted``), shown while
        it is pending."""
        tool = call.tool
        subject = end_user.subject if end_user is not None else None
        approval = self.approvals.find(
            agent_id, tool.name, call.args_digest, self.manifest_digest, subject
        )
        if approval is None:
            approval = open_approval(
                self.approvals,
                self.settings,
                agent_id,
                call,
                self.manifest_digest,
                rule=self._holding_rule(held_by),
                reason=reason,
                end_user=subject,
            )
            if isinstance(approval, ToolOutcome):
                return approval
            log.info("approval %s created for %s of agent %s", approval.id, tool.name, agent_id)
            self._metrics.approvals.labels(event="created").inc()
            if self.webhook is not None:
                self._tasks.spawn(self._notify(self.webhook, approval))
        if on_hold is not None:
            on_hold(approval.id)
        try:
            wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
            final = await asyncio.wait_for(self.waits.wait(approval.id), wait_s)
        except TimeoutError:
            # The request gave up waiting: this call is not made by it, whatever is decided
            # later. The approval stays open for the same call in a later request.
            return refused(
                "approval_pending",
                f"approval {approval.id} was not decided within this request's tool budget; "
                "the call was not executed. The same call can be made again once it is "
                "approved",
            )
        if final is None:
            return refused(
                "approval_pending",
                f"approval {approval.id} is still pending and the sidecar is stopping; "
                "the same call can be retried once it is approved",
            )
        if final.status == "expired":
            await self._record(final, "expired", None, "sidecar")
            return refused(
                "approval_expired", f"approval {final.id} expired before an operator decided"
            )
        if final.status == "denied":
            reason = f": {final.reason}" if final.reason else ""
            return refused("approval_denied", f"an operator denied this call{reason}")
        if final.status == "approved" and self.approvals.use(final.id):
            return None
        # Another identical call spent it first: this one needs its own approval.
        return refused(
            "approval_denied", f"approval {final.id} was already used; call again to ask anew"
        )

    def _holding_rule(self, decision: RuleDecision) -> str:
        """What asked for the approval, as the operator reads it."""
        if decision.effect == "confirm":
            return decision.reason
        require = self.settings.require
        shown = ", ".join(require) if isinstance(require, list) else require
        return f"approvals.require: {shown}"

    async def decide(
        self, approval_id: str, decision: Decision, reason: str | None, who: str
    ) -> Approval:
        """An operator's decision: recorded, audited and counted; waiting calls resume."""
        approval = self.approvals.decide(approval_id, decision, reason, who)
        await self._record(approval, "approved" if decision == "approve" else "denied", reason, who)
        return approval

    async def _record(
        self, approval: Approval, decision: str, reason: str | None, who: str
    ) -> None:
        latency_ms = round((time.time() - approval.created) * 1000, 3)
        self._metrics.approvals.labels(event=decision).inc()
        record = {
            "event": "approval_decided",
            "approval": approval.id,
            "tool": approval.tool,
            "args_digest": approval.args_digest,
            "decision": decision,
            "reason": reason,
            "who": who,
            "latency_ms": latency_ms,
        }
        if approval.end_user is not None:
            record["end_user"] = approval.end_user
        try:
            await self._audit.append(approval.agent, record)
        except Exception:
            log.exception("audit of the decision on approval %s failed", approval.id)

    async def _notify(self, webhook: ApprovalWebhook, approval: Approval) -> None:
        """Deliver the new approval to the webhook and audit how it went; never blocks the call."""
        client = self.executor.http
        if client is None:
            return
        delivery = await webhook.deliver(client, approval.public())
        if not delivery.delivered:
            log.warning(
                "approval webhook for %s not delivered after %d attempt(s): %s",
                approval.id,
                delivery.attempts,
                delivery.error,
            )
        try:
            await self._audit.append(approval.agent, delivery.record(approval.id))
        except Exception:
            log.exception("audit of the webhook of approval %s failed", approval.id)
