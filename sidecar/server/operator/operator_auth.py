"""Who may use the operator listener (SPEC §15), decided in one place for the operator API
and the console (issue 46).

- The operator token must be strong: a sidecar given a short or repetitive
  ``CLAW_OPERATOR_TOKEN`` refuses to start (``1999`` was guessed through the console in 12 s).
- Every failed attempt with a wrong token, by bearer header or console sign-in, makes its peer
  wait before its next attempt is even checked (1 s, doubling to 60 s; answered 429 with
  ``Retry-After`` meanwhile), and is audited in the sidecar's own chain (``claw-sidecar``, the
  compose name no agent can have).
- Host must name the listener (DNS rebinding, as on ``/mcp``): a page at an attacker's name
  pointed at the listener's address carries that name in ``Host``. Accepted: an IP address,
  the sidecar's ``allowed_hosts``, its operator alias (``admin_listen.host``), the
  ``--admin-host`` name and the names in ``CLAW_OPERATOR_HOSTS`` (comma-separated).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

import orjson
from aiohttp import web

from ...manifest import SIDECAR_SERVICE
from ...mcp.http import hostname
from ...model.env_names import OPERATOR_TOKEN_ENV
from ..request.context import STATE_KEY

MIN_TOKEN_CHARS = 32
MIN_TOKEN_DISTINCT = 8  # 32 random hex digits have fewer with a chance of about 1e-7
OPERATOR_HOSTS_ENV = "CLAW_OPERATOR_HOSTS"
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0
FORGET_AFTER_S = 15 * 60  # a peer's failures count only this long after its last one
MAX_PEERS = 4096  # past this, the peer that failed longest ago is forgotten
# The audit chain of the sidecar's own events: the compose name clawc reserves, so no agent's.
SIDECAR_AUDIT = SIDECAR_SERVICE

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class OperatorTokenError(Exception):
    """``CLAW_OPERATOR_TOKEN`` is set but too weak to guard the operator listener."""


def operator_token(env: Mapping[str, str]) -> str | None:
    """The operator token (None: the operator API and console are closed); raises
    :class:`OperatorTokenError` for a weak one."""
    token = env.get(OPERATOR_TOKEN_ENV) or None
    if token is None:
        return None
    if len(token) < MIN_TOKEN_CHARS or len(set(token)) < MIN_TOKEN_DISTINCT:
        raise OperatorTokenError(
            f"{OPERATOR_TOKEN_ENV} is too weak to guard the operator listener: use at least "
            f"{MIN_TOKEN_CHARS} random characters, e.g. $(openssl rand -hex 32)"
        )
    return token


@dataclass(slots=True)
class _Failures:
    count: int
    last: float
    until: float


class SignInThrottle:
    """Failed attempts per peer address: how long each must wait before trying again."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._peers: OrderedDict[str, _Failures] = OrderedDict()

    def wait_s(self, peer: str) -> float:
        """Seconds before ``peer`` may try a token again (0: now)."""
        failures = self._peers.get(peer)
        return 0.0 if failures is None else max(0.0, failures.until - self.clock())

    def failed(self, peer: str) -> tuple[int, float]:
        """Count a failure of ``peer``: its failures so far and the seconds it must now wait."""
        now = self.clock()
        failures = self._peers.pop(peer, None)
        if failures is None or now - failures.last > FORGET_AFTER_S:
            failures = _Failures(0, now, now)
        failures.count += 1
        delay = min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** min(failures.count - 1, 16))
        failures.last, failures.until = now, now + delay
        self._peers[peer] = failures  # the newest failure last: the oldest goes first
        while len(self._peers) > MAX_PEERS:
            self._peers.popitem(last=False)
        return failures.count, delay

    def succeeded(self, peer: str) -> None:
        self._peers.pop(peer, None)


SIGN_IN_KEY: web.AppKey[SignInThrottle] = web.AppKey("claw_operator_sign_in", SignInThrottle)


def peer_of(request: web.Request) -> str:
    return request.remote or "unknown"


def retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))


async def audit_failure(request: web.Request, via: str, failures: int, delay: float) -> None:
    """One failed attempt in the sidecar's own audit chain (never the token presented)."""
    record = {
        "event": "operator_sign_in_failed",
        "via": via,
        "peer": peer_of(request),
        "failures": failures,
        "retry_after_s": delay,
    }
    await request.app[STATE_KEY].audit.append(SIDECAR_AUDIT, record)


# -- Host -------------------------------------------------------------------------------------


def operator_hosts(names: Iterable[str], env: Mapping[str, str]) -> frozenset[str]:
    """The host names the operator listener answers to (IP addresses always)."""
    extra = env.get(OPERATOR_HOSTS_ENV, "").split(",")
    return frozenset(filter(None, (hostname(name) for name in (*names, *extra) if name.strip())))


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_check(allowed: frozenset[str]) -> Callable[[web.Request, Handler], Awaitable]:
    """A middleware that answers 403 to a request whose Host is not one of ``allowed`` nor an
    IP address (a rebinding page's Host is always its own name)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = hostname(request.headers.get("Host", ""))
        if host is None or not (host in allowed or _is_address(host)):
            body = {
                "error": {
                    "code": "forbidden_host",
                    "message": "Host is not one of the operator listener's names (add it to "
                    f"{OPERATOR_HOSTS_ENV})",
                }
            }
            return web.Response(
                status=403, body=orjson.dumps(body), content_type="application/json"
            )
        return await handler(request)

    return check
