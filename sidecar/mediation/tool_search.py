"""The engine's search of deferred tools (SPEC §23): ``claw_tool_search`` answered here, no
service called, and what it finds (or the conversation named before) offered from then on."""

from __future__ import annotations

import re
from typing import Any

import orjson

from ..manifest import ManagedTool
from ..model.conversation import ToolOutcome, ToolSpec, refused
from ..model.tool_search import found_envelope, index_of, read_request


class ToolSearch:
    """Mixed into ``MediationEngine``: entered only by a request whose agent defers tools."""

    # The engine's state this part reads and changes (set by ``MediationEngine._parse``).
    tools: dict[str, ManagedTool]
    deferred: dict[str, ManagedTool]
    """Tools offered only once ``claw_tool_search`` found them (§23), by request name."""
    found: set[str]
    search_name: str | None
    specs: list[ToolSpec]
    withdrawn: set[str]
    _request_name: dict[str, str]
    _history: list[dict[str, Any]]
    _history_text: str | None

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
