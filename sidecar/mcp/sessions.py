"""MCP sessions: issued on initialize, bound to the agent that created them, bounded in number;
each with the notifications waiting for its GET stream, bounded too."""

from __future__ import annotations

import asyncio
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

MAX_SESSIONS = 4096
MAX_SESSIONS_PER_AGENT = 64
MAX_PENDING_NOTICES = 32


class Notices:
    """The notifications waiting for a session's GET stream: one per key (a task's newer
    status replaces the one it supersedes), at most ``limit``, the oldest dropped first. Only
    while the client holds the stream open are any kept, so a client that never opens it, or
    never reads it, costs at most ``limit`` messages."""

    def __init__(self, limit: int = MAX_PENDING_NOTICES) -> None:
        self._pending: OrderedDict[str, bytes] = OrderedDict()
        self._ready = asyncio.Event()
        self._limit = limit
        self.listening = False
        self.closed = False

    def put(self, key: str, message: bytes) -> None:
        if not self.listening or self.closed:
            return
        self._pending.pop(key, None)
        self._pending[key] = message
        while len(self._pending) > self._limit:
            self._pending.popitem(last=False)
        self._ready.set()

    async def take(self, wait_s: float) -> list[bytes]:
        """What is waiting, oldest first, once anything is; empty after ``wait_s`` without
        (time for a keep-alive) or once the session has ended."""
        try:
            await asyncio.wait_for(self._ready.wait(), wait_s)
        except TimeoutError:
            return []
        self._ready.clear()
        taken = list(self._pending.values())
        self._pending.clear()
        return taken

    def stop_listening(self) -> None:
        self.listening = False
        self._pending.clear()

    def close(self) -> None:
        """The session ended: its stream ends."""
        self.closed = True
        self._ready.set()


@dataclass(slots=True)
class Session:
    id: str
    agent_id: str
    protocol_version: str
    capabilities: dict[str, Any] = field(default_factory=dict)
    """What the client declared at initialize (elicitation: SPEC §16)."""
    notices: Notices = field(default_factory=Notices)
    """For its GET stream: the status of the tasks its calls made (SPEC §22)."""


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
            self._sessions.pop(oldest).notices.close()
        while len(self._sessions) >= self._max:
            self._sessions.popitem(last=False)[1].notices.close()
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str, agent_id: str, *, touch: bool = True) -> Session | None:
        """The live session with this id owned by this agent; None for anything else.
        ``touch``: the client used it (it is then the last to be dropped)."""
        session = self._sessions.get(session_id)
        if session is None or session.agent_id != agent_id:
            return None
        if touch:
            self._sessions.move_to_end(session_id)
        return session

    def terminate(self, session_id: str, agent_id: str) -> bool:
        if self.get(session_id, agent_id) is None:
            return False
        self._sessions.pop(session_id).notices.close()
        return True

    def close_streams(self) -> None:
        """The sidecar is stopping: every session's GET stream ends now, not at the shutdown's
        timeout."""
        for session in self._sessions.values():
            session.notices.close()
