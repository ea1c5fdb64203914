"""The engine's taint (SPEC §17): which results taint the request, the taint a continued
provider-held chain brings back, and the tools taken back from the model once it is tainted."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterable, Mapping

from ..codecs.base import Codec
from ..manifest import ManagedTool, TaintMode
from ..model.canonical import digest
from ..model.conversation import Conversation, ToolCall, ToolChoice, ToolOutcome, ToolSpec
from ..model.taint import UNTAINTED, RequestTaint, held_when_tainted
from .commands import Command, Event, Recall, Recalled, Remember


class Tainting:
    """Mixed into ``MediationEngine``. The loop asks it only in a pod that holds tainted calls
    (``taint_mode``), of an agent with untrusted tools, or once tools were withdrawn: a plain
    request never enters this module."""

    # The engine's state this part reads (set by ``MediationEngine``).
    codec: Codec
    conversation: Conversation
    owner: str
    tools: Mapping[str, ManagedTool]
    specs: list[ToolSpec]
    taint_mode: TaintMode
    untrusted: frozenset[str]
    """The agent's tools whose results taint the request."""
    # What it changes.
    taint: RequestTaint = UNTAINTED
    """Untrusted results in this request's conversation, restored ones included (§17)."""
    withdrawn: frozenset[str] = frozenset()
    """Presented names of the tools taken back from the model once the request was tainted."""

    def _untrusted_results(self, calls: list[ToolCall], outcomes: list[ToolOutcome]) -> list[str]:
        """The one decision of which results taint: those of the untrusted tools whose calls
        reached their service (a refused call brought nothing in, nor does a call of a tool
        this request no longer has, such as a quarantined one). They taint the conversation
        from the model call that reads them, however the round is interrupted before that."""
        tools = [self.tools.get(call.name) for call in calls]
        return [
            t.name
            for t, o in zip(tools, outcomes, strict=True)
            if t is not None and t.name in self.untrusted and o.executed
        ]

    def _restore_chain_taint(self) -> Generator[Command, Event, None]:
        """The taint of the provider-held state this request continues from (§17); asked in a
        pod whose taint is not ``off`` (nothing to hold in one without untrusted tools)."""
        chain = self.codec.chain_ids(self.conversation)
        if not chain:
            return
        event = yield Recall([self._taint_key(chain_id) for chain_id in chain])
        if isinstance(event, Recalled):
            for remembered in event.found.values():
                self._taint_with_sources(remembered.taint_sources)

    def _remember_chain_taint(self, body: dict) -> Generator[Command, Event, None]:
        """A tainted answer's chain ids, remembered with the taint: a provider-held chain comes
        back as an id, without the rounds that tainted it."""
        sources = list(self.taint.sources)
        for chain_id in self.codec.answer_ids(self.conversation, body):
            key = self._taint_key(chain_id)
            yield Remember([key], [], origin=key, taint_sources=sources)

    def _taint_key(self, chain_id: str) -> str:
        return digest(self.owner, self.codec.api, "taint", chain_id)

    def _taint_with_sources(self, sources: Iterable[str]) -> None:
        self.taint = self.taint.with_sources(sources)
        if self.taint.tainted and self.taint_mode == "withdraw" and not self.withdrawn:
            self.withdrawn = frozenset(n for n, t in self.tools.items() if held_when_tainted(t))
            self.specs = [spec for spec in self.specs if spec.name not in self.withdrawn]

    def _offered(self, choice: ToolChoice) -> ToolChoice:
        """The choice without the withdrawn tools: a provider refuses one naming a tool it was
        not given."""
        if choice.name in self.withdrawn:
            choice = dataclasses.replace(choice, mode="auto", name=None)
        if choice.allowed is not None:
            kept = [name for name in choice.allowed if name not in self.withdrawn]
            choice = dataclasses.replace(choice, allowed=kept)
        return choice
