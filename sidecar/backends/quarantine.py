"""Tools whose live definition no longer matches the build's pin (§11.2): not offered to any
agent, and every call to them refused with ``tool_definition_changed``."""

from __future__ import annotations

from ..manifest import AgentBuild, ManagedTool, ToolsManifest
from ..model.conversation import ToolOutcome, refused

REFUSAL_CODE = "tool_definition_changed"


def may_drift(tool: ManagedTool) -> bool:
    """A tool whose live definition is checked against its pin (``backends/drift.py``): an MCP
    tool with a pin. No other tool is ever quarantined."""
    return tool.execution.transport == "mcp" and tool.pin is not None


class Quarantine:
    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}  # canonical name -> why
        self._views: dict[str, tuple[AgentBuild, int, AgentBuild]] = {}
        self._generation = 0

    def __contains__(self, canonical: str) -> bool:
        return canonical in self._reasons

    def reasons(self) -> dict[str, str]:
        return dict(sorted(self._reasons.items()))

    def hold(self, canonical: str, reason: str) -> bool:
        """Quarantine a tool; True when this is news."""
        if self._reasons.get(canonical) == reason:
            return False
        self._reasons[canonical] = reason
        self._generation += 1
        return True

    def release(self, canonical: str) -> bool:
        """Lift a quarantine (the definition matches its pin again); True when this is news."""
        if self._reasons.pop(canonical, None) is None:
            return False
        self._generation += 1
        return True

    def refusal(self, canonical: str) -> ToolOutcome | None:
        reason = self._reasons.get(canonical)
        if reason is None:
            return None
        message = (
            f"{canonical} is quarantined: its definition at the service changed since the build "
            f"was reviewed ({reason}); the operator must review and recompile"
        )
        return refused(REFUSAL_CODE, message)

    def withheld(self, agent: AgentBuild) -> list[tuple[ManagedTool, ToolOutcome]]:
        """The agent's quarantined tools, each with the refusal a call to it gets."""
        if not self._reasons:
            return []
        return [
            (tool, refusal)
            for tool in agent.tools.tools
            if (refusal := self.refusal(tool.name)) is not None
        ]

    def offered(self, agent: AgentBuild) -> AgentBuild:
        """The agent as it may be served now: its quarantined tools left out. The same object
        while nothing changes, so callers' per-agent caches keep working."""
        if not self._reasons:
            return agent
        cached = self._views.get(agent.agent.id)
        if cached is not None and cached[0] is agent and cached[1] == self._generation:
            return cached[2]
        kept = [tool for tool in agent.tools.tools if tool.name not in self._reasons]
        view = agent
        if len(kept) != len(agent.tools.tools):
            tools = ToolsManifest(agent=agent.tools.agent, tools=kept, policy=agent.tools.policy)
            view = AgentBuild(agent=agent.agent, tools=tools)
        self._views[agent.agent.id] = (agent, self._generation, view)
        return view
