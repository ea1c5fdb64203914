"""The engine's side of approvals the client answers (SPEC §16): a round stopped to ask the
client, and the rounds its answers settle, resumed (their records: ``stopped_rounds.py``)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any

from ..codecs.base import Codec
from ..codecs.responses.approval_items import asking_turn
from ..manifest import ManagedTool
from ..model.client_approval import ClientAnswer, unanswered
from ..model.conversation import (
    Conversation,
    ModelTurn,
    ToolCall,
    ToolOutcome,
    ToolResult,
    refused,
)
from ..model.taint import RequestTaint
from .commands import Command, Event, Recall, Recalled, Remember, Run
from .failures import budget_outcome
from .stopped_rounds import (
    ANSWERED,
    ASKED,
    PendingRound,
    StoppedRound,
    mentioned,
    record_key,
    settle,
)


class ApprovalRounds:
    """Mixed into ``MediationEngine``: entered only by a request in a protocol that carries
    approvals (``Codec.client_approvals``) that asks the client or brings its answers."""

    # The engine's state and steps this part uses (``MediationEngine``, ``Tainting``).
    codec: Codec
    conversation: Conversation
    owner: str
    taint: RequestTaint
    shown_turns: list[ModelTurn]
    restored_rounds: int
    refused_answers: list[ClientAnswer]
    """Approval answers naming nothing asked of this agent in this conversation (§16)."""
    _execute_round: Callable[..., Generator[Command, Event, list[ToolOutcome] | None]]
    _finish: Callable[[ModelTurn, list[dict[str, Any]]], Run]
    _trace_round: Callable[[list[ToolCall], list[ToolOutcome]], None]
    _tool_named: Callable[[str], ManagedTool | None]
    _taint_with_sources: Callable[[Iterable[str]], None]
    _untrusted_results: Callable[[list[ToolCall], list[ToolOutcome]], list[str]]

    def _ask_client(
        self,
        turn: ModelTurn,
        outcomes: list[ToolOutcome],
        transcript: list[dict[str, Any]],
        asked: dict[str, str],
        untrusted: list[str],
    ) -> Run:
        """Stop the round: remember it under each approval and answer with the requests.
        ``untrusted``: the untrusted tools among its answered calls, whose results enter the
        conversation (and taint it) when the round is resumed."""
        self._trace_round(turn.calls, outcomes)
        answered = [
            ToolResult(c, o) for c, o in zip(turn.calls, outcomes, strict=True) if c.id not in asked
        ]
        turn_group, outputs = self.codec.round_messages(turn, answered)
        stopped = StoppedRound(turn_group, outputs["items"], asked, untrusted)
        keys = [self._approval_key(ASKED, approval_id) for approval_id in asked.values()]
        sources = list(self.taint.sources)
        if keys:
            yield Remember(keys, stopped.messages(), origin=keys[0], taint_sources=sources)
        self.shown_turns.pop()  # it is shown as the turn that asks
        names = {c.id: (asked[c.id], c.name) for c in turn.calls if c.id in asked}
        yield from self._finish(asking_turn(turn, names), transcript)

    def _settle_approvals(
        self, history: list[dict[str, Any]]
    ) -> Generator[Command, Event, list[dict[str, Any]]]:
        """Put back the rounds the input's approval items stand for; run the calls its new
        answers approve. Asked only in a protocol that carries approvals."""
        asked, answers = mentioned(history)
        ids = list(dict.fromkeys([*asked, *(answer.approval_id for answer in answers)]))
        if not ids:
            return history
        keys = {kind: {self._approval_key(kind, i): i for i in ids} for kind in (ASKED, ANSWERED)}
        event = yield Recall([key for by_key in keys.values() for key in by_key])
        found = event.found if isinstance(event, Recalled) else {}
        records = {
            kind: {i: found[key] for key, i in by_key.items() if key in found}
            for kind, by_key in keys.items()
        }
        chained = bool(self.codec.chain_ids(self.conversation))
        settlement = settle(history, records[ASKED], records[ANSWERED], chained=chained)
        self.refused_answers = settlement.refused
        self.restored_rounds += len(settlement.restored) + len(settlement.pending)
        for remembered in settlement.restored:
            self._taint_with_sources(remembered.taint_sources)
        settled: list[dict[str, Any]] = []
        for part in settlement.history:
            if isinstance(part, PendingRound):
                settled += yield from self._resume_round(part)
            else:
                settled.append(part)
        return settled

    def _resume_round(self, pending: PendingRound) -> Generator[Command, Event, list[dict]]:
        """The stopped round's waiting calls, run or refused with the client's answers, under
        the taint of the conversation the model chose them in; the round's results taint
        what follows, those answered before it stopped too."""
        self._taint_with_sources(pending.taint_sources)
        stopped = pending.stopped
        turn = self.codec.parse_response({"output": stopped.turn["items"]})
        waiting = [call for call in turn.calls if call.id in stopped.asked]
        runnable = [c for c in waiting if c.id in pending.answers and self._tool_named(c.name)]
        ran = (yield from self._execute_round(runnable, pending.answers)) if runnable else []
        if ran is None:  # the request's tool budget is spent
            ran = [budget_outcome()] * len(runnable)
        by_id = dict(zip((c.id for c in runnable), ran, strict=True))
        outcomes = [by_id.get(c.id) or self._not_run(c, stopped.asked[c.id]) for c in waiting]
        self._trace_round(waiting, outcomes)
        self._taint_with_sources([*stopped.untrusted, *self._untrusted_results(waiting, outcomes)])
        results = [ToolResult(c, o) for c, o in zip(waiting, outcomes, strict=True)]
        order = [call.id for call in turn.calls]
        outputs = [*stopped.outputs, *self.codec.round_messages(turn, results)[1]["items"]]
        outputs.sort(key=lambda item: order.index(item.get("call_id")))
        round_ = [stopped.turn, {"role": "tool", "items": outputs}]
        keys = [self._approval_key(ANSWERED, approval_id) for approval_id in stopped.asked.values()]
        if keys:
            yield Remember(keys, round_, origin=keys[0], taint_sources=list(self.taint.sources))
        # A provider holding the chain (previous_response_id) has the turn: only outputs go.
        return round_[1:] if self.codec.chain_ids(self.conversation) else round_

    def _not_run(self, call: ToolCall, approval_id: str) -> ToolOutcome:
        """A held call the answers do not run: unanswered, or no longer a tool of this agent."""
        if self._tool_named(call.name) is None:
            return refused("unknown_tool", f"{call.name} is not a tool of this agent any more")
        return unanswered(approval_id)

    def _approval_key(self, kind: str, approval_id: str) -> str:
        return record_key(self.owner, self.codec.api, kind, approval_id)
