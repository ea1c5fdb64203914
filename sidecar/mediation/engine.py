"""The mediation loop, sans-IO (docs/contract.md §4.2).

:meth:`MediationEngine.run` is a generator: it yields commands (call the model, execute these
tool calls, remember these rounds, respond, fail) and receives events back. It never touches a
socket, a file or a clock, so every decision is testable in isolation: time reaches it only as
the tool time each ``ToolsDone`` reports, spent against the request's tool budget. The driver
in :mod:`clawpod.sidecar.server.mediated.mediated` performs the I/O and renders audit and metrics.

This module is the loop and what every request runs of it: reading the request, the rounds, the
answer and the continuity keys it is remembered under. Each concern only some requests have
is mixed in from its own module and entered only by them (tests/bench/test_trip.py counts the
modules a request enters): ``recall`` (hidden rounds found), ``approval_rounds`` (§16),
``tainting`` (§17), ``tool_search`` (§23), ``tool_offer`` (a build's offer made) and
``failures`` (a call or the request stopped).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..codecs.base import Codec
from ..manifest import AgentBuild, Effect, ManagedTool, TaintMode
from ..model.canonical import digest
from ..model.client_approval import ClientAnswer, ClientApproval
from ..model.conversation import (
    CheckedCall,
    CodecError,
    Fingerprints,
    ModelTurn,
    ToolCall,
    ToolChoice,
    ToolOutcome,
    ToolResult,
)
from ..model.end_user import EndUser, owner_of
from ..model.taint import withdrawn
from ..model.usage import Usage
from . import failures
from .approval_rounds import ApprovalRounds
from .commands import (
    BeginStream,
    CallModel,
    Command,
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
    Run,
    ToolsDone,
)
from .recall import Lookups, put_back
from .stopped_rounds import asked_in
from .tainting import Tainting
from .tool_offer import ToolOffer, make_offer
from .tool_search import ToolSearch

CheckArguments = Callable[[ManagedTool, Any, str], "CheckedCall | ToolOutcome"]
"""The one argument check (``ArgumentCheck``, execution/executor.py), given by the driver: the
engine stays sans-IO and never loads a schema validator itself."""

# Tools are withdrawn once this share of total_timeout_ms is spent (docs/contract.md §4.2
# point 11).
FINALIZE_AT = 0.9
# Turns runners rewrite between requests (Claude Code's git status): never part of a key.
SYSTEM_ROLES = frozenset({"system", "developer"})
# An answer is remembered with each of this many turns before it (a runner may move the
# context message that came last to the end: the turn before it then comes nearest).
REMEMBERED = 2
# Turns before an answer kept to tell conversations with equal answers apart.
CONTEXT = 6

# The offer of each agent build lately served, for requests whose runner tools take none of its
# names (nearly all): a grant of hundreds of tools is presented once, not on every request.
# Keyed by the build's identity; each entry holds the build, so an id is not reused while kept.
_OFFERS: dict[int, tuple[AgentBuild, ToolOffer]] = {}
KEPT_OFFERS = 256


def offer_of(agent: AgentBuild, runner_names: set[str]) -> ToolOffer:
    """The agent's offer to a request with these runner tools: a kept one without entering
    ``tool_offer``."""
    kept = _OFFERS.get(id(agent))
    if kept is None or kept[0] is not agent:
        kept = (agent, make_offer(agent, set()))
        if len(_OFFERS) >= KEPT_OFFERS:
            del _OFFERS[next(iter(_OFFERS))]
        _OFFERS[id(agent)] = kept
    if runner_names.isdisjoint(kept[1].names):
        return kept[1]
    return make_offer(agent, runner_names)  # a runner tool takes a name: presented anew


@dataclass(slots=True)
class AnsweredCall:
    """One call of a round and how it was answered: what audit and metrics are made of."""

    call: ToolCall
    tool: ManagedTool | None
    """None for a call the runner owns (a refused mixed round)."""
    outcome: ToolOutcome


# Building a conversation only reads the client's body: any of these is a body whose parts do
# not have the protocol's shapes (a message that is not an object).
_SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)


class MediationEngine(ApprovalRounds, Tainting, ToolSearch):
    def __init__(
        self,
        codec: Codec,
        agent: AgentBuild,
        body: dict[str, Any],
        *,
        check: CheckArguments,
        model_timeout_s: float,
        withheld: Sequence[tuple[ManagedTool, ToolOutcome]] = (),
        taint_mode: TaintMode = "off",
        untrusted: frozenset[str] | None = None,
        end_user: EndUser | None = None,
    ) -> None:
        """``withheld``: the agent's tools not offered now (quarantined, §11.2), each with the
        refusal a call to it gets: a model that still calls one is refused, not handed to the
        runner as a tool nobody knows. ``untrusted``: the names of the agent's tools whose
        results taint the request (§17), decided once per agent (``CallPlan.untrusted``); left
        out, read from the agent's tools, so that no caller trusts a tool by omission.
        ``end_user``: whom the request is for (SPEC §21): its remembered rounds are theirs."""
        self.codec = codec
        self._withheld_tools = withheld
        self.agent = agent
        self.agent_id = agent.agent.id
        # ``owner_of``'s own answer without an end user, without the call on the hot path.
        self.owner = self.agent_id if end_user is None else owner_of(self.agent_id, end_user)
        """Whose remembered rounds, approvals and taint this request may find (every key's)."""
        self.on_mixed = agent.agent.on_mixed
        self.policy = agent.tools.policy
        self.body = body
        self.check = check
        self.model_timeout_s = model_timeout_s
        self.tool_budget_s = self.policy.total_timeout_ms / 1000
        self.tool_time_s = 0.0
        """Tool execution time spent so far; model generation does not count (§8.2)."""
        self.usage = Usage(input_key=codec.input_key, output_key=codec.output_key)
        self.rounds: list[list[AnsweredCall]] = []
        """Every round answered, in order, for the driver's audit and metrics."""
        self.shown_turns: list[ModelTurn] = []
        """Turns before the answer: a streaming client saw their text (§8.1)."""
        self.executed_rounds = 0
        self.restored_rounds = 0
        """Hidden rounds of earlier turns put back into this request (for the audit)."""
        self._seen: dict[tuple[str, bytes], tuple[str, ToolOutcome]] = {}
        self.taint_mode = taint_mode
        self.untrusted = (
            frozenset(t.name for t in agent.tools.tools if t.untrusted)
            if untrusted is None
            else untrusted
        )
        self._parsed: tuple[Fail | None] | None = None
        self.refused_answers: list[ClientAnswer] = []
        self.offered: list[list[str]] = []
        """The tool names offered with each model call, for an agent with deferred tools (§23)."""

    def prepare(self) -> Fail | None:
        """Read the client request once: the driver needs its conversation (the retry identity)
        before the loop starts. A malformed request gets the Fail the loop will yield."""
        if self._parsed is None:
            self._parsed = (self._parse(),)
        return self._parsed[0]

    def prepared_in_slices(self) -> Iterator[None]:
        """``prepare``, then a long conversation's fingerprints a slice at a time: the driver
        lets other requests run between the slices (issue 46)."""
        if self.prepare() is None and isinstance(self.conversation.fingerprints, Fingerprints):
            yield from self.conversation.fingerprints.in_slices()

    def _parse(self) -> Fail | None:
        """Read the client request; a malformed one is the exchange's first and last command."""
        too_many = self.codec.too_many_items(self.body)
        if too_many is not None:
            return Fail(too_many.status, too_many.code, too_many.message)
        try:
            self.conversation = self.codec.parse_request(self.body)
        except CodecError as exc:
            return Fail(400, "invalid_request", str(exc))
        except _SHAPE_ERRORS as exc:
            message = (
                f"the request body does not have the shape of a {self.codec.title} request "
                f"({type(exc).__name__}); check the types of messages, tools and tool_choice"
            )
            return Fail(400, "invalid_request", message)
        conversation = self.conversation
        offer = offer_of(self.agent, conversation.runner_tool_names)
        self.tools = offer.tools
        """Request name -> managed tool: shared by the requests of one build, never changed."""
        self.withheld = {
            tool.presented: (tool, refusal)
            for tool, refusal in self._withheld_tools
            if tool.presented not in self.tools
            and tool.presented not in conversation.runner_tool_names
        }
        self.deferred = offer.deferred
        self.found = set()
        self._history = conversation.messages
        self._history_text = None
        self.specs = list(offer.specs)
        self.search_name = offer.search_name
        self._request_name = offer.request_name
        if self.deferred and self.codec.searches_natively(conversation):
            # The provider's search loads them, and its API refuses a call of one it did not
            # load: sent deferred beside the runner's search tool, nothing left to find here.
            self.specs, self.search_name, self.deferred = list(offer.native_specs), None, {}
        return None

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> Run:
        invalid = self.prepare()
        if invalid is not None:
            yield invalid
            return
        conversation = self.conversation
        if conversation.stream:
            yield BeginStream()
        history = yield from self._restore_hidden_rounds()
        if self.taint_mode != "off":  # nothing to hold: a pod without untrusted tools
            yield from self._restore_chain_taint()
        if self.codec.client_approvals:
            history = yield from self._settle_approvals(history)
        self._history = history
        transcript: list[dict[str, Any]] = []
        choice = self._initial_choice()
        finalizing = False
        mixed_retried = False
        # The last turn, and how long the transcript was when it was asked for.
        previous: tuple[ModelTurn, int] | None = None
        while True:
            finalizing = finalizing or self._nearly_out_of_time()
            remaining = self._remaining_s()
            if remaining <= 0:
                yield failures.timed_out(self.policy)
                return
            if finalizing:
                offered = ToolChoice(mode="none")
            else:
                offered = self._offered(choice) if self.withdrawn else choice
            body = self._request_body(history + transcript, previous, transcript, offered)
            asked_at = len(transcript)
            if self.search_name is not None:
                self.offered.append([] if finalizing else [spec.name for spec in self.specs])
            event = yield CallModel(body, self.model_timeout_s)
            turn = self._accept_reply(event)
            if isinstance(turn, Fail):
                yield turn
                return
            previous = (turn, asked_at)
            # Only names presented to the model for THIS agent are the sidecar's (points 4, 6).
            managed = [c for c in turn.calls if self._managed(c.name)]
            if not managed:  # an answer, or calls the runner owns: hand it back
                yield from self._finish(turn, transcript)
                return
            self.shown_turns.append(turn)
            if finalizing:  # tools were withdrawn and the model still calls them (point 11)
                self._trace_round(turn.calls, [failures.budget_outcome()] * len(turn.calls))
                yield failures.budget_spent(managed, self.executed_rounds, self.policy)
                return
            if len(managed) < len(turn.calls):  # mixed executors: nothing runs (point 5)
                outcomes = [failures.mixed_outcome()] * len(turn.calls)
                if self.on_mixed == "retry" and not mixed_retried:
                    mixed_retried = True
                    transcript += self._answer(turn, outcomes)
                    continue
                self._trace_round(turn.calls, outcomes)
                yield failures.mixed(turn.calls, self._managed)
                return
            if self._nearly_out_of_time():
                # Budget spent: answer the pending calls, withdraw tools, one final call.
                transcript += self._answer(turn, [failures.budget_outcome()] * len(turn.calls))
                finalizing = True
                continue
            outcomes = yield from self._execute_round(turn.calls)
            if outcomes is None:
                yield failures.timed_out(self.policy)
                return
            untrusted = self._untrusted_results(turn.calls, outcomes) if self.untrusted else []
            # Only a protocol that carries approvals asks its client (a call elsewhere is
            # never given a client to ask, so none of its outcomes can be such a request).
            asked = asked_in(turn.calls, outcomes) if self.codec.client_approvals else {}
            if asked:  # the client approves these calls: the response asks it (§16)
                yield from self._ask_client(turn, outcomes, transcript, asked, untrusted)
                return
            transcript += self._answer(turn, outcomes)
            if untrusted:
                self._taint_with_sources(untrusted)
            choice = _relaxed(choice)
            # The last round allowed has run: the next call is the final one, without tools.
            finalizing = self.executed_rounds >= self.policy.max_rounds

    # --- steps ------------------------------------------------------------------------------

    def _restore_hidden_rounds(self) -> Generator[Command, Event, list[dict[str, Any]]]:
        """Put back the hidden rounds of earlier turns before the answers they led to (§8.3)."""
        messages = self.conversation.messages
        lookups = self._answer_lookups()
        if not lookups:
            return list(messages)
        keys = [key for _, candidates in lookups.values() for key in candidates]
        event = yield Recall(list(dict.fromkeys(keys)))
        found = event.found if isinstance(event, Recalled) else {}
        if not found:
            return list(messages)
        restored = put_back(messages, lookups, found, self.codec.resolve_references)
        self._taint_with_sources(restored.taint_sources)
        self.restored_rounds += restored.rounds
        return restored.history

    def _request_body(
        self,
        messages: list[dict[str, Any]],
        previous: tuple[ModelTurn, int] | None,
        transcript: list[dict[str, Any]],
        choice: ToolChoice,
    ) -> dict[str, Any]:
        """A continuation of the previous turn where the provider holds it, else everything."""
        if previous is not None:
            turn, asked_at = previous
            body = self.codec.continue_request(
                self.conversation, turn, transcript[asked_at:], self.specs, choice
            )
            if body is not None:
                return body
        return self.codec.render_request(self.conversation, messages, self.specs, choice)

    def _accept_reply(self, event: Event) -> ModelTurn | Fail:
        if isinstance(event, ModelFailed):
            return failures.upstream_failure(event)
        if not isinstance(event, ModelReplied):
            raise TypeError(f"CallModel answered with {type(event).__name__}")
        try:
            turn = self.codec.parse_response(event.body)
        except CodecError as exc:
            return Fail(502, "upstream_protocol_error", f"the provider's reply is malformed: {exc}")
        self.usage.add(turn.usage)
        return turn

    def _execute_round(
        self, calls: list[ToolCall], answers: dict[str, ClientAnswer] | None = None
    ) -> Generator[Command, Event, list[ToolOutcome] | None]:
        """Validate, de-duplicate and execute one round; outcomes keep call order.
        ``answers``: the client's approval answers to calls of a resumed round (§16)."""
        self.executed_rounds += 1
        outcomes: list[ToolOutcome | None] = [None] * len(calls)
        executions: list[PlannedExecution] = []
        positions: list[int] = []
        keys: list[tuple[str, bytes]] = []
        first_in_round: dict[tuple[str, bytes], int] = {}
        repeats: dict[int, int] = {}
        for position, call in enumerate(calls):
            if call.name in self.withheld:
                outcomes[position] = self.withheld[call.name][1]
                continue
            if call.name == self.search_name:
                outcomes[position] = self._search(call.arguments)
                continue
            if call.name in self.deferred and not self._was_found(call.name):
                outcomes[position] = self._not_found_yet(call.name)
                continue
            tool = self.tools[call.name]
            if call.name in self.withdrawn:  # the model calls a tool it is no longer offered
                outcomes[position] = withdrawn(tool)
                continue
            checked = self.check(tool, call.arguments, call.id)
            if isinstance(checked, ToolOutcome):
                outcomes[position] = checked
                continue
            key = (tool.name, checked.canonical)
            if key in self._seen:
                earlier_id, earlier = self._seen[key]
                outcomes[position] = failures.repeated(tool, earlier_id, earlier)
            elif key in first_in_round:
                repeats[position] = first_in_round[key]
            else:
                first_in_round[key] = position
                client = None
                if self.codec.client_approvals:
                    client = ClientApproval(call.id, (answers or {}).get(call.id))
                executions.append(PlannedExecution(call, checked, client))
                positions.append(position)
                keys.append(key)
        if executions:
            remaining = self._remaining_s()
            if remaining <= 0:
                return None
            event = yield ExecuteTools(
                executions,
                concurrent=all(e.checked.effect is Effect.READ_ONLY for e in executions),
                timeout_s=min(self.policy.timeout_per_tool_ms / 1000, remaining),
                max_result_bytes=self.policy.max_tool_result_bytes,
                budget_s=remaining,
                taint=self.taint,
            )
            if not isinstance(event, ToolsDone) or len(event.outcomes) != len(executions):
                raise TypeError("ExecuteTools must be answered with one outcome per execution")
            self.tool_time_s += event.elapsed_s
            for position, key, outcome in zip(positions, keys, event.outcomes, strict=True):
                outcomes[position] = outcome
                self._seen[key] = (calls[position].id, outcome)
        for position, source in repeats.items():
            tool = self.tools[calls[position].name]
            outcomes[position] = failures.repeated(tool, calls[source].id, _known(outcomes[source]))
        return [_known(o) for o in outcomes]

    def _managed(self, name: str) -> bool:
        """Whether a call of this name is the sidecar's: a tool of this agent, or its search."""
        return name in self.tools or name in self.withheld or name == self.search_name

    def _answer(self, turn: ModelTurn, outcomes: list[ToolOutcome]) -> list[dict[str, Any]]:
        """Trace a round and render it (assistant turn + results) for the next model call."""
        self._trace_round(turn.calls, outcomes)
        results = [ToolResult(c, o) for c, o in zip(turn.calls, outcomes, strict=True)]
        return self.codec.round_messages(turn, results)

    def _finish(self, turn: ModelTurn, transcript: list[dict[str, Any]]) -> Run:
        codec, conversation = self.codec, self.conversation
        if conversation.stream:
            # The client saw every turn's text: it echoes their concatenation, which the
            # stored answer replaces when the conversation comes back.
            body = codec.shown_response(conversation, self.shown_turns, turn, self.usage.fields)
            rounds = [*transcript, codec.answer_message(turn)]
        else:
            body = codec.render_response(conversation, turn, self.usage.fields)
            # An answer echoed by reference comes back as the answer kept here.
            referable = codec.reference_fingerprint(body) is not None
            rounds = [*transcript, codec.answer_message(turn)] if referable else transcript
        if self.taint.tainted and self.taint_mode != "off":
            yield from self._remember_chain_taint(body)
        if transcript:
            answers = [codec.echo_fingerprint(conversation, body)]
            answers += filter(None, [codec.reference_fingerprint(body)])
            context = self._turns()[-CONTEXT:]
            befores = dict.fromkeys(context[-REMEMBERED:])
            keys = [self._key(answer, before) for answer in answers for before in befores]
            if keys:
                sources = list(self.taint.sources)
                yield Remember(keys, rounds, context, origin=keys[0], taint_sources=sources)
        yield Respond(body)

    # --- policy helpers ---------------------------------------------------------------------

    def _initial_choice(self) -> ToolChoice:
        """A choice naming managed tools (canonical or presented) names them as presented here."""
        choice = self.conversation.tool_choice
        if choice.allowed is not None:
            choice = dataclasses.replace(choice, allowed=list(map(self._presented, choice.allowed)))
        if choice.mode != "named" or choice.name is None:
            return choice
        return dataclasses.replace(choice, name=self._presented(choice.name))

    def _presented(self, name: str) -> str:
        """The name a choice's tool has in this request: a runner tool keeps its own."""
        if name in self.conversation.runner_tool_names:
            return name
        return self._request_name.get(name, name)

    def _remaining_s(self) -> float:
        return self.tool_budget_s - self.tool_time_s

    def _nearly_out_of_time(self) -> bool:
        return self.tool_time_s >= FINALIZE_AT * self.tool_budget_s

    def _tool_named(self, name: str) -> ManagedTool | None:
        withheld = self.withheld.get(name)
        return self.tools.get(name) or (withheld[0] if withheld else None)

    def _trace_round(self, calls: list[ToolCall], outcomes: list[ToolOutcome]) -> None:
        self.rounds.append(
            [
                AnsweredCall(call, self._tool_named(call.name), outcome)
                for call, outcome in zip(calls, outcomes, strict=True)
            ]
        )

    # --- continuity keys (§8.3) ---------------------------------------------------------------
    # Hidden rounds are found by the turn they led to and the turn just before it, not by the
    # bytes of everything before: runners rewrite system prompts, move context messages, drop
    # old turns. The codecs' fingerprints already ignore ids' punctuation, re-serialised
    # content and placeholder text. The agent, and the end user if any, is in every key: agents
    # never see each other's, nor an end user another's replaying their turns (SPEC §21).
    # Every request with an earlier answer or a round computes them: they stay in the loop's
    # module, and ``recall`` is entered only for rounds the store found.

    def _key(self, answer: str, before: str) -> str:
        return digest(self.owner, self.codec.api, answer, before)

    def _answer_lookups(self) -> Lookups:
        """Position of every assistant turn -> the turns before it (system prompts aside) and
        the keys its rounds may be stored under."""
        lookups: Lookups = {}
        before: list[str] = []
        fingerprints = self.conversation.fingerprints
        for index, role in enumerate(self.conversation.roles):
            if role in SYSTEM_ROLES:
                continue  # never part of a key: its fingerprint is not even computed
            fingerprint = fingerprints[index]
            if role == "assistant" and before:
                context = before[-CONTEXT:]
                keys = [self._key(fingerprint, b) for b in dict.fromkeys(context[-REMEMBERED:])]
                lookups[index] = (context, keys)
            before.append(fingerprint)
        return lookups

    def _turns(self) -> list[str]:
        """Fingerprints of the request's turns, system prompts aside."""
        fingerprints = self.conversation.fingerprints
        return [
            fingerprints[index]
            for index, role in enumerate(self.conversation.roles)
            if role not in SYSTEM_ROLES
        ]


def _relaxed(choice: ToolChoice) -> ToolChoice:
    """A forced choice has been honoured once a round ran; forcing it again never ends."""
    if choice.mode in ("named", "required"):
        return dataclasses.replace(choice, mode="auto", name=None)
    return choice


def _known(outcome: ToolOutcome | None) -> ToolOutcome:
    if outcome is None:
        raise AssertionError("a call of the round has no outcome")
    return outcome
