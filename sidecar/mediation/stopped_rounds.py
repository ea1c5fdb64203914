"""Rounds stopped for the client's approval and resumed by its answer (SPEC §16), sans-IO.

A round whose calls wait for the client is remembered in the continuity store under one key
per approval (``approval-asked``): the model's turn, the outputs of the round's calls that were
answered already, and which call each approval holds. The response ends with the approval
requests. When the answers come back, the round is put back in the conversation where the
client shows its requests (or its answers), its waiting calls are run or refused with the
answers, and the settled round is remembered again (``approval-answered``), so later requests
that echo the exchange get the same round without anything running twice. Only answers after
the last model turn of the input are acted on; an earlier one whose round was settled stands
for that settled round.

Layout of an asked record: ``[turn group, outputs group, {"role": "approvals", "asked":
{call id: approval id}, "untrusted": [tool, ...]}]`` (Responses groups, ``codecs/responses/``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..codecs.responses.approval_items import REQUEST, RESPONSE, answer_of, requested_id
from ..model.canonical import digest
from ..model.client_approval import APPROVAL_UNANSWERED, ClientAnswer, requested_approval
from ..model.conversation import ToolCall, ToolOutcome
from .commands import Remembered

ASKED = "approval-asked"
ANSWERED = "approval-answered"
_ASKED_ROLE = "approvals"
_KINDS = (REQUEST, RESPONSE)


def record_key(agent: str, api: str, kind: str, approval_id: str) -> str:
    """The agent is part of it: an answer naming another agent's approval finds nothing."""
    return digest(agent, api, kind, approval_id)


@dataclass(slots=True)
class StoppedRound:
    turn: dict[str, Any]
    """The model's turn as a group (``{"role": "assistant", "items": [...]}``)."""
    outputs: list[dict[str, Any]]
    """Output items of the round's calls the sidecar answered before it stopped."""
    asked: dict[str, str]
    """Call id -> the approval it waits for."""
    untrusted: list[str]
    """The untrusted tools among the answered calls: their results taint the conversation
    once the round is resumed (the record's ``taint_sources`` is the taint before it)."""

    def messages(self) -> list[dict[str, Any]]:
        return [
            self.turn,
            {"role": "tool", "items": self.outputs},
            {"role": _ASKED_ROLE, "asked": self.asked, "untrusted": self.untrusted},
        ]

    @classmethod
    def of(cls, remembered: Remembered) -> StoppedRound | None:
        messages = remembered.messages
        if len(messages) != 3 or messages[2].get("role") != _ASKED_ROLE:
            return None
        approvals = messages[2]
        untrusted = [str(tool) for tool in approvals.get("untrusted", ())]
        return cls(messages[0], list(messages[1]["items"]), dict(approvals["asked"]), untrusted)


@dataclass(slots=True)
class PendingRound:
    """A stopped round to resume now: its waiting calls get these answers (call id ->)."""

    stopped: StoppedRound
    answers: dict[str, ClientAnswer]
    taint_sources: list[str]


@dataclass(slots=True)
class Settlement:
    history: list[dict[str, Any] | PendingRound]
    """The conversation without approval items; a pending round stands where it goes."""
    pending: list[PendingRound] = field(default_factory=list)
    restored: list[Remembered] = field(default_factory=list)
    """Settled rounds put back as they were (their taint comes back with them)."""
    refused: list[ClientAnswer] = field(default_factory=list)
    """Answers naming no approval asked of this agent (forged, another agent's, lost)."""


def asked_in(calls: list[ToolCall], outcomes: list[ToolOutcome]) -> dict[str, str]:
    """Call id -> approval id, for the calls of a round that wait for the client."""
    return {
        call.id: approval_id
        for call, outcome in zip(calls, outcomes, strict=True)
        if (approval_id := requested_approval(outcome))
    }


def mentioned(history: list[dict[str, Any]]) -> tuple[set[str], list[ClientAnswer]]:
    """The sidecar's approval ids the input asks about, and every answer it gives."""
    items = [
        item for group in history for item in group.get("items", ()) if item.get("type") in _KINDS
    ]
    if not items:  # every request reads this: the common case stops here
        return set(), []
    asked = {approval_id for item in items if (approval_id := requested_id(item))}
    answers = [answer for item in items if (answer := answer_of(item, asked)) is not None]
    return asked, answers


def settle(
    history: list[dict[str, Any]],
    asked_records: dict[str, Remembered],
    answered_records: dict[str, Remembered],
    *,
    chained: bool,
) -> Settlement:
    """Replace the approval items of ``history`` by the rounds they stand for.

    ``asked_records`` / ``answered_records``: approval id -> what the store holds for it;
    ``chained``: the provider holds the earlier turns (``previous_response_id``), so the
    requests are not echoed. Otherwise an answer counts only beside the request it answers:
    an approval asked in another conversation cannot be spent in this one."""
    asked_ids, _ = mentioned(history)
    if not chained:
        asked_records = {i: r for i, r in asked_records.items() if i in asked_ids}
    last_turn = max((i for i, g in enumerate(history) if g.get("role") == "assistant"), default=-1)
    answers: dict[str, tuple[ClientAnswer, bool]] = {}  # approval id -> answer, trailing
    for position, group in enumerate(history):
        for item in group.get("items", ()):
            answer = answer_of(item, asked_ids)
            if answer is not None:
                answers[answer.approval_id] = (answer, position > last_turn)
    settlement = Settlement([])
    placed: set[str] = set()
    for group in history:
        kept, approval_ids = _without_approval_items(group, asked_ids)
        rounds = [asked_records[i] for i in approval_ids if i in asked_records]
        for remembered in rounds:
            if remembered.origin not in placed:
                placed.add(remembered.origin)
                settlement.history += _resumed(remembered, answers, answered_records, settlement)
        if kept is not None and not (rounds and group.get("role") == "assistant"):
            settlement.history.append(kept)  # the stored turn replaces the echoed one
    settlement.refused = [
        answer for approval_id, (answer, _) in answers.items() if approval_id not in asked_records
    ]
    return settlement


def _without_approval_items(
    group: dict[str, Any], asked_ids: set[str]
) -> tuple[dict[str, Any] | None, list[str]]:
    """The group without the sidecar's approval items (None if nothing is left), and the
    approval ids those items named."""
    items = group.get("items")
    if not isinstance(items, list):
        return group, []
    kept: list[dict[str, Any]] = []
    named: list[str] = []
    for item in items:
        approval_id = requested_id(item) if group.get("role") == "assistant" else None
        answer = answer_of(item, asked_ids)
        if approval_id is not None:
            named.append(approval_id)
        elif answer is not None:
            named.append(answer.approval_id)
        else:
            kept.append(item)
    if not named:
        return group, []
    return ({**group, "items": kept} if kept else None), named


def _resumed(
    remembered: Remembered,
    answers: dict[str, tuple[ClientAnswer, bool]],
    answered_records: dict[str, Remembered],
    settlement: Settlement,
) -> list[dict[str, Any] | PendingRound]:
    stopped = StoppedRound.of(remembered)
    if stopped is None:
        return []
    mine = {cid: answers[aid] for cid, aid in stopped.asked.items() if aid in answers}
    trailing = any(is_trailing for _, is_trailing in mine.values())
    settled = [answered_records[a] for a in stopped.asked.values() if a in answered_records]
    # A settled round stands, also for a retry of the request that settled it (every SDK
    # retries byte-identical): it is never rewritten. Only an answer to a call it left
    # unanswered reopens it.
    if settled and not (trailing and _answers_unanswered(settled[0], mine)):
        settlement.restored.append(settled[0])
        return list(settled[0].messages)
    pending = PendingRound(
        stopped, {cid: answer for cid, (answer, _) in mine.items()}, remembered.taint_sources
    )
    settlement.pending.append(pending)
    return [pending]


def _answers_unanswered(settled: Remembered, answers: dict[str, Any]) -> bool:
    """Whether ``answers`` (call id ->) answer a call the settled round left unanswered."""
    outputs = settled.messages[1].get("items") or [] if len(settled.messages) > 1 else []
    return any(
        item.get("call_id") in answers and APPROVAL_UNANSWERED in str(item.get("output"))
        for item in outputs
    )
