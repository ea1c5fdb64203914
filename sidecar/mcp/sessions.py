"""MCP sessions: issued on initialize, bound to the agent that created them, bounded in number."""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

MAX_SESSIONS = 4096
MAX_SESSIONS_PER_AGENT = 64


@dataclass(slots=True)
class Session:
    id: str
    agent_id: str
    protocol_version: str
    capabilities: dict[str, Any] = field(default_factory=dict)
    """What the client declared at initialize (elicitation: SPEC §16)."""


class SessionStore:
    """Least recently used sessions are dropped first; a dropped session's next request gets
    404, and the MCP client then starts a new session (as the transport spec prescribes)."""

    def __init__(
        self, max_sessions: int = MAX_SESSIONS, max_per_agent: int = MAX_SESSIONS_PER_AGENT
    ) -> None:
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._max = max_sessions
        self._max_per_agent = max_per_agent

    def __len__(self) -> int:
        return len(self._sessions)

    def create(
        self, agent_id: str, protocol_version: str, capabilities: dict[str, Any] | None = None
    ) -> Session:
        # Visible ASCII only, unguessable (the transport spec's requirements for session ids).
        session = Session(
            secrets.token_urlsafe(24), agent_id, protocol_version, dict(capabilities or {})
        )
        if sum(1 for s in self._sessions.values() if s.agent_id == agent_id) >= self._max_per_agent:
            oldest = next(s.id for s in self._sessions.values() if s.agent_id == agent_id)
            del self._sessions[oldest]
        while len(self._sessions) >= self._max:
            self._sessions.popitem(last=False)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str, agent_id: str) -> Session | None:
        """The live session with this id owned by this agent; None for anything else."""
        session = self._sessions.get(session_id)
        if session is None or session.agent_id != agent_id:
            return None
        self._sessions.move_to_end(session_id)
        return session

    def terminate(self, session_id: str, agent_id: str) -> bool:
        if self.get(session_id, agent_id) is None:
            return False
        del self._sessions[session_id]
        return True
