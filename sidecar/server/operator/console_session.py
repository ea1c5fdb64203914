"""Console sign-in sessions and CSRF tokens (SPEC §15).

Signing in with the operator token opens a session: a random id in an ``HttpOnly``,
``SameSite=Strict`` cookie (``Secure`` over TLS), looked up in this sidecar's memory, with its
own random CSRF token that every state-changing request must carry (the synchronizer-token
pattern). Sessions are server-side, so a forged, expired or signed-out cookie matches nothing,
and a cookie of one sidecar means nothing to another; a restart signs everyone out. The
session libraries for aiohttp keep state in the cookie itself (aiohttp-session's encrypted
storage, which would need a key shared by nothing and revocation it lacks), and aiohttp has no
maintained CSRF library, so the few lines below do both with ``secrets`` and ``hmac``.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

SESSION_COOKIE = "claw_console"
SIGN_IN_COOKIE = "claw_console_sign_in"  # double-submit CSRF token of the sign-in form
COOKIE_PATH = "/console"
SESSION_LIFETIME_S = 12 * 3600  # at most a working day, then sign in again
SESSION_IDLE_S = 3600
SIGN_IN_FORM_S = 600
MAX_SESSIONS = 32  # a few operators with a few browsers; the oldest session goes first


@dataclass(slots=True)
class Session:
    id: str
    csrf: str
    created: float
    used: float


def same_secret(presented: str | None, expected: str) -> bool:
    """Constant-time equality of a presented secret (absent: never equal)."""
    if not presented:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


class Sessions:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._sessions: dict[str, Session] = {}

    def open(self) -> Session:
        now = self.clock()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now, now)
        self._sessions[session.id] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of a cookie's value; an expired one is dropped."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self.clock()
        if now - session.created > SESSION_LIFETIME_S or now - session.used > SESSION_IDLE_S:
            self._sessions.pop(session_id, None)
            return None
        session.used = now
        return session

    def close(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
