"""What an agent's tools offer one request (docs/contract.md §4.2 points 4, 6; §23): each tool
by the name it has there, a runner tool keeping a name it shares; the deferred tools and the
search that finds them. The engine keeps each build's offer (``engine.offer_of``)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..manifest import AgentBuild, ManagedTool
from ..model.conversation import ToolSpec
from ..model.tool_search import SEARCH_DESCRIPTION, SEARCH_SCHEMA, SEARCH_TOOL


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
    names: frozenset[str]
    """Every name the offer takes, the search's (or the one it would take) among them: a runner
    tool of none of these names leaves the offer as it is."""


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
    names = frozenset(tools) | {search_name or SEARCH_TOOL}
    return ToolOffer(tools, tuple(specs), deferred, search_name, request_name, native_specs, names)


def _alternative_name(base: str, taken: set[str]) -> str:
    for attempt in itertools.count(1):
        suffix = "_claw" if attempt == 1 else f"_claw{attempt}"
        candidate = base[: 64 - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
    raise AssertionError("unreachable")
