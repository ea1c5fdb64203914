"""The mediation loop, sans-IO (docs/contract.md §4.2).

:meth:`MediationEngine.run` is a generator: it yields commands (call the model, execute these
tool calls, remember these rounds, respond, fail) and receives events back. It never touches a
socket, a file or a clock, so every decision is testable in isolation: time reaches it only as
the tool time each ``ToolsDone`` reports, spent against the request's tool budget. The driver
in :mod:`clawpod.sidecar.server.mediated.mediated` performs the I/O and renders audit and metrics.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..codecs.base import Codec
from ..codecs.responses.approval_items import asking_turn
from ..manifest import AgentBuild, Effect, ManagedTool, TaintMode
from ..model.canonical import digest
from ..model.client_approval import ClientAnswer, ClientApproval, unanswered
from ..model.conversation import (
    CheckedCall,
    CodecError,
    Fingerprints,
    ModelTurn,
    ToolCall,
    ToolChoice,
    ToolOutcome,
    ToolResult,
    ToolSpec,
    refused,
)
from ..model.end_user import EndUser, owner_of
from ..model.errors import upstream_failure
from ..model.taint import UNTAINTED, RequestTaint, held_when_tainted, withdrawn
from ..model.tool_search import (
    SEARCH_DESCRIPTION,
    SEARCH_SCHEMA,
    SEARCH_TOOL,
    found_envelope,
    index_of,
    read_request,
)
from ..model.usage import Usage
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
    Remembered,
    Respond,
    ToolsDone,
)
from .stopped_rounds import (
    ANSWERED,
    ASKED,
    PendingRound,
    StoppedRound,
    asked_in,
    mentioned,
    record_key,
    settle,
)

CheckArguments = Callable[[ManagedTool, Any, str], "CheckedCall | ToolOutcome"]
"""The one argument check (``ArgumentCheck``, execution/executor.py), given by the driver: the
engine stays sans-IO and never loads a schema validator itself."""
Run = Generator[Command, Event, None]

# Tools are withdrawn once this share of total_timeout_ms is spent (docs/contract.md §4.2
# point 11).
FINALIZE_AT = 0.9
NOT_EXECUTED = (
    "not executed: this response mixed sidecar tools and your own tools; "
    "re-issue sidecar tools and your own tools in separate turns"
)
# Turns runners rewrite between requests (Claude Code's git status): never part of a key.
SYSTEM_ROLES = frozenset({"system", "developer"})
# An answer is remembered with each of this many turns before it (a runner may move the
# context message that came last to the end: the turn before it then comes nearest).
REMEMBERED = 2
# Turns before an answer kept to tell conversations with equal answers apart.
CONTEXT = 6
# Content blocks (Messages) and items (Responses) that are tool calls.
CALL_PARTS = frozenset({"tool_use", "function_call"})
BUDGET_EXHAUSTED = (
    "not executed: the tool budget of this request is spent; answer with what you have"
)


def present_tools(tools: list[ManagedTool], runner_names: set[str]) -> dict[str, ManagedTool]:
    """Request-local name -> managed tool. A runner tool keeps a colliding name; the managed
    tool then gets a deterministic alternative that collides with nothing else."""
    taken = runner_names | {tool.presented for tool in tools}
    named: dict[str, ManagedTool] = {}
    for tool in tools:
        name = tool.presented
        if name in runner_names:
            name = _alternative_name(name, taken)
            taken.add(name)
        named[name] = tool
    return named


@dataclass(frozen=True, slots=True)
class ToolOffer:
    """What an agent's tools offer one request: each tool by the name it has there, the specs
    offered from the first model call (its search among them when some are deferred, §23), the
    deferred tools, and the request name of every canonical and presented name."""

    tools: dict[str, ManagedTool]
    specs: tuple[ToolSpec, ...]
    deferred: dict[str, ManagedTool]
    search_name: str | None
    request_name: dict[str, str]
    native_specs: tuple[ToolSpec, ...]
    """Every tool, the deferred ones marked for the provider's own search to load."""


def make_offer(agent: AgentBuild, runner_names: set[str]) -> ToolOffer:
    tools = present_tools(list(agent.tools.tools), runner_names)
    deferred_names = frozenset(agent.agent.deferred or ())
    deferred = {n: t for n, t in tools.items() if t.name in deferred_names}
    specs = [
        ToolSpec(n, t.description, t.input_schema) for n, t in tools.items() if n not in deferred
    ]
    native_specs = (
        *specs,
        *(ToolSpec(n, t.description, t.input_schema, deferred=True) for n, t in deferred.items()),
    )
    search_name = None
    if deferred:
        taken = runner_names | set(tools)
        search_name = _alternative_name(SEARCH_TOOL, taken) if SEARCH_TOOL in taken else SEARCH_TOOL
        specs.append(ToolSpec(search_name, SEARCH_DESCRIPTION, SEARCH_SCHEMA))
    request_name = {t.name: n for n, t in tools.items()} | {
        t.presented: n for n, t in tools.items()
    }
    return ToolOffer(tools, tuple(specs), deferred, search_name, request_name, native_specs)


# The offer of each agent build lately served, for requests whose runner tools take none of its
# names (nearly all): a grant of hundreds of tools is presented once, not on every request.
# Keyed by the build's identity; each entry holds the build, so an id is not reused while kept.
_OFFERS: dict[int, tuple[AgentBuild, frozenset[str], ToolOffer]] = {}
KEPT_OFFERS = 256


def offer_of(agent: AgentBuild, runner_names: set[str]) -> ToolOffer:
    """The agent's offer to a request with these runner tools."""
    kept = _OFFERS.get(id(agent))
    if kept is None or kept[0] is not agent:
        offer = make_offer(agent, set())
        names = frozenset(offer.tools) | {offer.search_name or SEARCH_TOOL}
        kept = (agent, names, offer)
        if len(_OFFERS) >= KEPT_OFFERS:
            del _OFFERS[next(iter(_OFFERS))]
        _OFFERS[id(agent)] = kept
    if runner_names.isdisjoint(kept[1]):
        return kept[2]
    return make_offer(agent, runner_names)  # a runner tool takes a name: presented anew


def _alternative_name(base: str, taken: set[str]) -> str:
    for attempt in itertools.count(1):
        suffix = "_claw" if attempt == 1 else f"_claw{attempt}"
        candidate = base[: 64 - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
    raise AssertionError("unreachable")


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


class MediationEngine:
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
        self.taint: RequestTaint = UNTAINTED
        """Untrusted results in this request's conversation, restored ones included (§17)."""
        self.withdrawn: set[str] = set()
        """Presented names of the tools taken back from the model once the request was tainted."""
        self._parsed: tuple[Fail | None] | None = None
        self.refused_answers: list[ClientAnswer] = []
        """Approval answers naming nothing asked of this agent in this conversation (§16)."""
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
        """Tools offered only once ``claw_tool_search`` found them (§23), by request name."""
        self.found: set[str] = set()
        self._history: list[dict[str, Any]] = conversation.messages
        self._history_text: str | None = None
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
        yield from self._restore_chain_taint()
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
                yield self._timed_out()
                return
            body = self._request_body(
                history + transcript,
                previous,
                transcript,
                ToolChoice(mode="none") if finalizing else self._offered(choice),
            )
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
                self._trace_round(turn.calls, [self._budget_outcome()] * len(turn.calls))
                yield Fail(502, "tool_budget_exhausted", self._budget_message(managed))
                return
            if len(managed) < len(turn.calls):  # mixed executors: nothing runs (point 5)
                outcomes = [refused("mixed_executor_response", NOT_EXECUTED)] * len(turn.calls)
                if self.on_mixed == "retry" and not mixed_retried:
                    mixed_retried = True
                    transcript += self._answer(turn, outcomes)
                    continue
                self._trace_round(turn.calls, outcomes)
                yield Fail(502, "mixed_executor_response", self._mixed_message(turn.calls))
                return
            if self._nearly_out_of_time():
                # Budget spent: answer the pending calls, withdraw tools, one final call.
                transcript += self._answer(turn, [self._budget_outcome()] * len(turn.calls))
                finalizing = True
                continue
            outcomes = yield from self._execute_round(turn.calls)
            if outcomes is None:
                yield self._timed_out()
                return
            untrusted = self._untrusted_results(turn.calls, outcomes)
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
        history: list[dict[str, Any]] = []
        used: set[str] = set()
        for index, message in enumerate(messages):
            if index in lookups:
                context, candidates = lookups[index]
                best = _best_match(context, [found[k] for k in candidates if k in found])
                if best is not None and best.origin not in used:  # an answer's rounds go once
                    used.add(best.origin)
                    self._taint_with_sources(best.taint_sources)
                    answered = _ends_in_answer(best.messages)
                    self.restored_rounds += _rounds_in(best.messages) - answered
                    if answered and not _calls_tools(message):
                        history.extend(best.messages)
                        continue  # the stored answer stands for the runner's echo of it
                    # An echo with tool calls stands: the runner's results answer its ids
                    # (OpenClaw rewrites them), so only the hidden rounds go in before it.
                    history.extend(best.messages[:-1] if answered else best.messages)
                    message = self.codec.resolve_references(message, best.messages)
            history.append(message)
        return history

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
            return self._upstream_failure(event)
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
                outcomes[position] = _repeat(tool, earlier_id, earlier)
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
            outcomes[position] = _repeat(tool, calls[source].id, _known(outcomes[source]))
        return [_known(o) for o in outcomes]

    # --- tool search (§23) -------------------------------------------------------------------

    def _managed(self, name: str) -> bool:
        """Whether a call of this name is the sidecar's: a tool of this agent, or its search."""
        return name in self.tools or name in self.withheld or name == self.search_name

    def _search(self, arguments: Any) -> ToolOutcome:
        """Answer ``claw_tool_search`` here (no service is called): the deferred tools that best
        match, which the next model call is offered. Only this agent's granted tools are in
        the index; a withdrawn tool (§17) is never found again."""
        request = read_request(arguments)
        if isinstance(request, str):
            return refused("invalid_arguments", request)
        index = index_of(self.deferred)
        withdrawn = frozenset(self.tools[n].name for n in self.withdrawn)
        found = index.search(request.query, request.limit, excluded=withdrawn)
        matches = [(self._request_name[tool.name], tool) for tool in found]
        for name, tool in matches:
            if name not in self.found:
                self.found.add(name)
                self.specs.append(ToolSpec(name, tool.description, tool.input_schema))
        return ToolOutcome(found_envelope(matches), None, None, executed=False, latency_ms=0.0)

    def _was_found(self, name: str) -> bool:
        """Found by a search of this request, or named in the conversation before it (a search
        or a call of an earlier turn): then it is offered from here on too. Being found is not
        what allows a call (the grant is): it keeps a model from guessing at names."""
        if name in self.found:
            return True
        if self._history_text is None:  # read once, and only when a model calls such a tool
            try:
                self._history_text = orjson.dumps(self._history).decode()
            except TypeError:  # an integer beyond 64 bits: nothing counts as found before
                self._history_text = ""
        if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", self._history_text):
            return False
        tool = self.deferred[name]
        self.found.add(name)
        if name not in self.withdrawn:  # a withdrawn tool (§17) is refused as such, not offered
            self.specs.append(ToolSpec(name, tool.description, tool.input_schema))
        return True

    def _not_found_yet(self, name: str) -> ToolOutcome:
        return refused(
            "tool_not_found",
            f"{name} is offered only once {self.search_name} has found it: search for it first",
        )

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
            # A provider-held chain comes back as an id, without the rounds that tainted it.
            sources = list(self.taint.sources)
            for chain_id in codec.answer_ids(conversation, body):
                key = self._taint_key(chain_id)
                yield Remember([key], [], origin=key, taint_sources=sources)
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

    # --- approvals the client answers (§16, mediation/stopped_rounds.py) ------------------

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
        answers approve."""
        if not self.codec.client_approvals:
            return history
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
            ran = [self._budget_outcome()] * len(runnable)
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

    # --- taint (§17) ------------------------------------------------------------------------

    def _untrusted_results(self, calls: list[ToolCall], outcomes: list[ToolOutcome]) -> list[str]:
        """The one decision of which results taint: those of the untrusted tools whose calls
        reached their service (a refused call brought nothing in, nor does a call of a tool
        this request no longer has, such as a quarantined one). They taint the conversation
        from the model call that reads them, however the round is interrupted before that."""
        if not self.untrusted:
            return []
        tools = [self.tools.get(call.name) for call in calls]
        return [
            t.name
            for t, o in zip(tools, outcomes, strict=True)
            if t is not None and t.name in self.untrusted and o.executed
        ]

    def _restore_chain_taint(self) -> Generator[Command, Event, None]:
        """The taint of the provider-held state this request continues from (§17)."""
        if self.taint_mode == "off":  # nothing to hold: a pod without untrusted tools
            return
        chain = self.codec.chain_ids(self.conversation)
        if not chain:
            return
        event = yield Recall([self._taint_key(chain_id) for chain_id in chain])
        if isinstance(event, Recalled):
            for remembered in event.found.values():
                self._taint_with_sources(remembered.taint_sources)

    def _taint_key(self, chain_id: str) -> str:
        return digest(self.owner, self.codec.api, "taint", chain_id)

    def _taint_with_sources(self, sources: Iterable[str]) -> None:
        self.taint = self.taint.with_sources(sources)
        if self.taint.tainted and self.taint_mode == "withdraw" and not self.withdrawn:
            self.withdrawn = {n for n, t in self.tools.items() if held_when_tainted(t)}
            self.specs = [spec for spec in self.specs if spec.name not in self.withdrawn]

    def _offered(self, choice: ToolChoice) -> ToolChoice:
        """The choice without the withdrawn tools: a provider refuses one naming a tool it was
        not given."""
        if not self.withdrawn:
            return choice
        if choice.name in self.withdrawn:
            choice = dataclasses.replace(choice, mode="auto", name=None)
        if choice.allowed is not None:
            kept = [name for name in choice.allowed if name not in self.withdrawn]
            choice = dataclasses.replace(choice, allowed=kept)
        return choice

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

    def _timed_out(self) -> Fail:
        return Fail(
            504,
            "timeout",
            f"the request exceeded its total tool budget of {self.policy.total_timeout_ms} ms",
        )

    def _budget_outcome(self) -> ToolOutcome:
        return refused("budget_exhausted", BUDGET_EXHAUSTED)

    def _budget_message(self, calls: list[ToolCall]) -> str:
        names = ", ".join(f"{c.name} ({c.id})" for c in calls)
        return (
            f"the model kept calling tools after the tool budget was spent "
            f"({self.executed_rounds} rounds, max_rounds {self.policy.max_rounds}): {names}"
        )

    def _mixed_message(self, calls: list[ToolCall]) -> str:
        sidecar = [f"{c.name} ({c.id})" for c in calls if self._managed(c.name)]
        runner = [f"{c.name} ({c.id})" for c in calls if not self._managed(c.name)]
        return (
            "the model mixed sidecar tool calls [" + ", ".join(sidecar) + "] and runner tool "
            "calls [" + ", ".join(runner) + "] in one response; nothing was executed"
        )

    def _upstream_failure(self, event: ModelFailed) -> Fail:
        if event.status is None:
            err = upstream_failure(event.kind, event.message)
            return Fail(err.status, err.code, err.message)
        if event.status in (401, 403) or event.status >= 500:
            # The provider rejected the sidecar's key or failed: not the client's fault.
            message = f"provider answered {event.status}: {event.message}"
            return Fail(502, "upstream_error", message, retry_after=event.retry_after)
        return Fail(event.status, "upstream_error", event.message, retry_after=event.retry_after)

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

    def _key(self, answer: str, before: str) -> str:
        return digest(self.owner, self.codec.api, answer, before)

    def _answer_lookups(self) -> dict[int, tuple[list[str], list[str]]]:
        """Position of every assistant turn -> the turns before it (system prompts aside) and
        the keys its rounds may be stored under."""
        lookups: dict[int, tuple[list[str], list[str]]] = {}
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


def _best_match(context: list[str], candidates: list[Remembered]) -> Remembered | None:
    """The stored rounds whose turns before the answer are most like this request's: the turn
    right before the answer must be among them (two conversations with equal answers differ
    there), and every stored turn missing here counts against (an equal answer later in the
    same conversation has more of them)."""
    nearest = context[-1]
    best: tuple[int, Remembered] | None = None
    here = set(context)
    for candidate in candidates:
        stored = set(candidate.context)
        if stored and nearest not in stored:
            continue
        score = len(stored & here) - len(stored - here)
        if best is None or score > best[0]:
            best = (score, candidate)
    return best[1] if best is not None else None


def _rounds_in(messages: list[dict[str, Any]]) -> int:
    """Hidden rounds in a stored transcript: its assistant turns (Responses items carry no role:
    each function call item counts)."""
    return sum(
        1
        for m in messages
        if m.get("role") == "assistant"
        or (m.get("role") is None and m.get("type") == "function_call")
    )


def _ends_in_answer(rounds: list[dict[str, Any]]) -> bool:
    """Stored rounds end in tool results; those stored for a streamed answer end in the answer
    as the provider gave it, which takes the place of the runner's echo of what it saw."""
    return bool(rounds) and rounds[-1].get("role") == "assistant"


def _calls_tools(message: dict[str, Any]) -> bool:
    """A runner's echo of an answer that called the runner's tools, in any protocol's shape."""
    if message.get("tool_calls") or message.get("function_call"):
        return True
    parts = message.get("content") if isinstance(message.get("content"), list) else []
    parts = [*parts, *(message.get("items") or [])]
    return any(isinstance(p, dict) and p.get("type") in CALL_PARTS for p in parts)


def _relaxed(choice: ToolChoice) -> ToolChoice:
    """A forced choice has been honoured once a round ran; forcing it again never ends."""
    if choice.mode in ("named", "required"):
        return dataclasses.replace(choice, mode="auto", name=None)
    return choice


def _repeat(tool: ManagedTool, earlier_id: str, earlier: ToolOutcome) -> ToolOutcome:
    if tool.effect.repeatable:
        return dataclasses.replace(earlier, executed=False, latency_ms=0.0)
    return refused(
        "duplicate_call",
        f"identical call already made in this request (call {earlier_id}); "
        "it is not executed twice",
    )


def _known(outcome: ToolOutcome | None) -> ToolOutcome:
    if outcome is None:
        raise AssertionError("a call of the round has no outcome")
    return outcome
