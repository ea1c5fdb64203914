"""Rates and budgets counted in Redis or Valkey, shared by every sidecar that names the same
server (SPEC §24): ``x-claw.shared-limits: {url-env: REDIS_URL, on-unreachable: fail-closed |
fail-local}``.

Each operation is one Lua script the server runs atomically: a reservation checks every budget
of a request and holds its estimate in all of them or in none, so N sidecars together admit
what one sidecar would (the limit, plus at most the estimate of the one request that may start
alone on a remainder). A group's rates per minute (requests, tokens) are the same rule in a
minute's window, checked in the same script. Counters expire with their window: a day's budget
keys at the end of the day (plus an hour), a minute's two minutes after it, a rate bucket after
two periods idle. A hold lives at most ``HOLD_LEASE_S``,
so a sidecar that dies mid-request does not keep its holds.

The client is redis-py (``redis`` on PyPI): maintained by Redis, pure Python when hiredis is
absent, with an asyncio API; the scripts run by SHA1 and are sent again to a server that forgot
them (``Script``). Every call is bounded in time (``TIMEOUT_S``, including the wait for a
connection, as a whole: the connections have no socket timeout of their own) and every
answer in size (``BoundedReplies``) and shape (``_integer``): a hostile or broken server costs
a refusal or a fallback, never the sidecar.

When the server cannot be reached, ``fail-closed`` refuses what it would have checked, and
``fail-local`` decides on this sidecar's own counters (``LocalCounters``); either way the change
is logged and on ``/metrics``, and the spending and releases it could not write are kept and
written once the server answers again: the sidecar reconnects by itself.
"""

from __future__ import annotations

import asyncio
import calendar
import functools
import hashlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis._parsers import _AsyncRESP2Parser
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import InvalidResponse, NoScriptError, RedisError

from ..manifest import OnUnreachable, Rate
from ..observability.metrics import Metrics
from .budgets import utc_day
from .counters import (
    DAY_REFUSED,
    GROUP_PREFIX,
    MINUTE_REFUSED,
    USER_PREFIX,
    Claim,
    Hold,
    LocalCounters,
    RateKey,
    Refused,
    SharedLimitsUnavailable,
    utc_minute,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

KEY_PREFIX = "{clawpod}"
"""Every key in one hash slot: a script's keys must share one on a cluster."""
TIMEOUT_S = 1.0
HOLD_LEASE_S = 3600
MAX_CONNECTIONS = 64
MAX_REPLY_BYTES = 64 * 1024
"""Every answer of these scripts is a few numbers; the fleet view reads a few per budget."""
MAX_PENDING = 10_000
"""Releases kept for a server that cannot be reached; past it, the oldest are left to expire."""
MAX_PENDING_SPENDS = 100_000
"""Spends kept for a server that cannot be reached (each its own, to be written once); past it,
the oldest is dropped, and logged: the audit still has it."""
SPEND_MARKER_S = 6 * 3600
"""How long a written spend's marker lives: a spend kept longer than that could count twice."""
BACKOFF_S = (0.5, 5.0)
NANO_USD = 10**9
"""USD are counted in integers of 1e-9 USD: the server's counters are integers, exactly."""
DAY_KEY_GRACE_S = 3600
STORE_LABEL = "redis"
"""The gauge's one label: a pod without a shared store exports no sample of it."""

_EXPIRE_HOLDS = """
local function unhold(budget, id)
  local held = redis.call('HGET', budget, 'h:' .. id)
  if held then
    local t, u = string.match(held, '^(%d+) (%d+)$')
    if t ~= '0' then redis.call('HINCRBY', budget, 'ht', '-' .. t) end
    if u ~= '0' then redis.call('HINCRBY', budget, 'hu', '-' .. u) end
    redis.call('HDEL', budget, 'h:' .. id)
    return 1
  end
  return 0
end
"""

RESERVE = (
    _EXPIRE_HOLDS
    + """
-- KEYS: each window's budget hash and holds zset, in pairs (a subject's day, a group's
-- minute). ARGV: hold id, tokens, nano-USD, hold lease (ms), then each window's token,
-- nano-USD and request limits (-1: none) and its keys' expiry (unix s).
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local id, tokens, usd = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local subjects = #KEYS / 2
for i = 1, subjects do
  local budget, holds = KEYS[2 * i - 1], KEYS[2 * i]
  local gone = redis.call('ZRANGEBYSCORE', holds, '-inf', now_ms)
  for _, old in ipairs(gone) do unhold(budget, old) end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', holds, '-inf', now_ms) end
end
local function refuses(limit, spent, held, estimate)
  if limit < 0 then return false end
  return spent + held >= limit or (held > 0 and spent + held + estimate > limit)
end
for i = 1, subjects do
  local v = redis.call('HMGET', KEYS[2 * i - 1], 't', 'u', 'ht', 'hu', 'r')
  local t, u = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  local ht, hu = tonumber(v[3]) or 0, tonumber(v[4]) or 0
  local requests = tonumber(ARGV[3 + 4 * i])
  if refuses(tonumber(ARGV[1 + 4 * i]), t, ht, tokens)
      or refuses(tonumber(ARGV[2 + 4 * i]), u, hu, usd)
      or (requests >= 0 and (tonumber(v[5]) or 0) >= requests) then
    return i
  end
end
for i = 1, subjects do
  local budget, holds = KEYS[2 * i - 1], KEYS[2 * i]
  redis.call('HINCRBY', budget, 'ht', ARGV[2])
  redis.call('HINCRBY', budget, 'hu', ARGV[3])
  -- a request counts when it starts
  if ARGV[3 + 4 * i] ~= '-1' then redis.call('HINCRBY', budget, 'r', 1) end
  -- the limits it was held against, for the fleet view (clawc budgets)
  redis.call('HSET', budget, 'h:' .. id, ARGV[2] .. ' ' .. ARGV[3],
    'lt', ARGV[1 + 4 * i], 'lu', ARGV[2 + 4 * i])
  redis.call('ZADD', holds, now_ms + tonumber(ARGV[4]), id)
  redis.call('EXPIREAT', budget, ARGV[4 + 4 * i])
  redis.call('EXPIREAT', holds, ARGV[4 + 4 * i])
end
return 0
"""
)

RELEASE = (
    _EXPIRE_HOLDS
    + """
-- KEYS: each subject's budget hash and holds zset, in pairs. ARGV: hold id.
local released = 0
for i = 1, #KEYS / 2 do
  released = released + unhold(KEYS[2 * i - 1], ARGV[1])
  redis.call('ZREM', KEYS[2 * i], ARGV[1])
end
return released
"""
)

SPEND = """
-- KEYS: each window's budget hash, then this spend's marker. ARGV: tokens, nano-USD, the
-- marker's lifetime (s), then each window's key expiry (unix s). A spend written again (its
-- first answer was lost) finds its marker and counts nothing.
if not redis.call('SET', KEYS[#KEYS], '1', 'NX', 'EX', ARGV[3]) then return 0 end
for i = 1, #KEYS - 1 do
  if ARGV[1] ~= '0' then redis.call('HINCRBY', KEYS[i], 't', ARGV[1]) end
  if ARGV[2] ~= '0' then redis.call('HINCRBY', KEYS[i], 'u', ARGV[2]) end
  redis.call('EXPIREAT', KEYS[i], ARGV[3 + i])
end
return #KEYS - 1
"""

SETTLE = (
    _EXPIRE_HOLDS
    + """
-- A finished request: its hold released and its spending counted in one round trip.
-- KEYS: the hold's windows (budget hash, holds zset) in pairs, then each window the spend counts
-- in, then the spend's marker. ARGV: hold id, the number of hold pairs, tokens, nano-USD, the
-- marker's lifetime (s), then each spend window's key expiry (unix s).
local pairs_ = tonumber(ARGV[2])
for i = 1, pairs_ do
  unhold(KEYS[2 * i - 1], ARGV[1])
  redis.call('ZREM', KEYS[2 * i], ARGV[1])
end
if not redis.call('SET', KEYS[#KEYS], '1', 'NX', 'EX', ARGV[5]) then return 0 end
for i = 2 * pairs_ + 1, #KEYS - 1 do
  if ARGV[3] ~= '0' then redis.call('HINCRBY', KEYS[i], 't', ARGV[3]) end
  if ARGV[4] ~= '0' then redis.call('HINCRBY', KEYS[i], 'u', ARGV[4]) end
  redis.call('EXPIREAT', KEYS[i], ARGV[5 + i - 2 * pairs_])
end
return 1
"""
)

TAKE = """
-- KEYS: the bucket. ARGV: its size (calls), its period (ms). Answers {admitted, calls left x 1000}.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local size, period = tonumber(ARGV[1]), tonumber(ARGV[2])
local v = redis.call('HMGET', KEYS[1], 'n', 'at')
local calls, at = tonumber(v[1]), tonumber(v[2])
if calls == nil or at == nil then calls, at = size, now_ms end
calls = math.min(size, calls + math.max(0, now_ms - at) * size / period)
local admitted = 0
if calls >= 1 then
  calls = calls - 1
  admitted = 1
end
redis.call('HSET', KEYS[1], 'n', tostring(calls), 'at', tostring(now_ms))
redis.call('PEXPIRE', KEYS[1], ARGV[2] * 2)
return {admitted, math.floor(calls * 1000)}
"""


class BoundedReplies(_AsyncRESP2Parser):
    """redis-py's pure-Python RESP2 parser, refusing an answer past ``MAX_REPLY_BYTES`` before
    reading it: a bulk string or an array announced larger is never waited for nor held."""

    _left = MAX_REPLY_BYTES

    async def read_response(self, disable_decoding: bool = False) -> Any:
        self._left = MAX_REPLY_BYTES
        return await super().read_response(disable_decoding)

    def _spend(self, size: int) -> None:
        self._left -= size
        if self._left < 0:
            raise InvalidResponse(f"an answer of the shared store over {MAX_REPLY_BYTES} bytes")

    async def _readline(self) -> bytes:
        line = await super()._readline()
        self._spend(len(line) + 2)
        return line

    async def _read(self, length: int) -> bytes:
        self._spend(length + 2)
        return await super()._read(length)


class Script:
    """A Lua script run by its SHA1 (EVALSHA), loaded again when the server no longer has it
    (restarted or flushed). Not redis-py's own Script: its checks for a pipeline or a cluster
    client cost 0.02 ms per call, and the sidecar calls it with neither."""

    def __init__(self, client: Redis, text: str) -> None:
        self._client = client
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()

    async def __call__(self, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await self._client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await self._client.script_load(self.text)
            return await self._client.evalsha(self.sha, len(keys), *keys, *args)


class SharedLimitsError(Exception):
    """The pod names a shared store the sidecar cannot be given (a missing or malformed URL)."""


def connect(url: str, timeout_s: float = TIMEOUT_S) -> Redis:
    """A client of ``url`` (redis://, rediss://, unix://) whose every wait is bounded; nothing
    is sent until the first check (the server may come up after the sidecar)."""
    try:
        pool = _pool(url, timeout_s)
    except ValueError:  # the message may quote the URL, and so its password
        raise SharedLimitsError("the shared store's URL is not a redis:// URL") from None
    return Redis(connection_pool=pool)


def _pool(url: str, timeout_s: float) -> ConnectionPool:
    # Not redis-py's BlockingConnectionPool: its wait for a free connection cost 0.15 ms per
    # call here even when one was free. SharedCounters keeps calls within MAX_CONNECTIONS.
    # No socket timeout (redis-py's default is 5 s): each call is bounded as a whole by its
    # caller (SharedCounters._bounded, clawc budgets), and redis-py drops a connection whose
    # command was cancelled, so a late answer is never read as the next command's. With one,
    # redis-py sends each command in a task of its own (asyncio.wait_for on Python 3.11).
    return ConnectionPool.from_url(
        url,
        max_connections=MAX_CONNECTIONS,
        socket_timeout=None,
        socket_connect_timeout=timeout_s,
        protocol=2,
        parser_class=BoundedReplies,
        retry=Retry(NoBackoff(), 0),
        driver_info=None,  # no CLIENT SETINFO: two round trips less per new connection
    )


def subject_key(pod: str, subject: str) -> str:
    """A group is one across pods, and so is an end user (pods that share a store share their
    identity provider); an agent is its pod's (replicas of a pod share it)."""
    if subject.startswith(GROUP_PREFIX):
        return "group/" + subject.removeprefix(GROUP_PREFIX)
    if subject.startswith(USER_PREFIX):
        return "user/" + subject.removeprefix(USER_PREFIX)
    return f"pod/{pod}/agent/{subject}"


def budget_key(pod: str, subject: str, day: str) -> str:
    return f"{KEY_PREFIX}:budget:{subject_key(pod, subject)}:{day}"


def holds_key(pod: str, subject: str, day: str) -> str:
    return f"{KEY_PREFIX}:holds:{subject_key(pod, subject)}:{day}"


def minute_expiry(minute: str) -> int:
    """Unix seconds when a minute's counters go: two minutes after it (and at least two from
    now: a sidecar's clock may lag the server's a little)."""
    end = calendar.timegm(time.strptime(minute, "%Y-%m-%dT%H:%M")) + 60
    return max(end, int(time.time())) + 120


def day_expiry(day: str) -> int:
    """Unix seconds when a day's counters go: an hour after the day's end (and at least an hour
    from now: a sidecar whose clock lags still finds them)."""
    return max(_day_end(day), int(time.time())) + DAY_KEY_GRACE_S


@functools.lru_cache(maxsize=4)
def _day_end(day: str) -> int:
    return calendar.timegm(time.strptime(day, "%Y-%m-%d")) + 86400


def nano_usd(usd: float) -> int:
    return max(0, round(usd * NANO_USD))


def _limit(value: float | None) -> int:
    return -1 if value is None else int(value)


def _integer(reply: object, low: int, high: int) -> int:
    if type(reply) is not int or not low <= reply <= high:
        raise InvalidResponse(f"an answer of the shared store out of shape: {reply!r:.80}")
    return reply


def _rate_answer(rate: Rate) -> Callable[[object], tuple[int, int]]:
    def shape(reply: object) -> tuple[int, int]:
        if not isinstance(reply, list) or len(reply) != 2:
            raise InvalidResponse("a rate answer of the shared store out of shape")
        return _integer(reply[0], 0, 1), _integer(reply[1], 0, rate.count * 1000)

    return shape


def _number(field: object) -> int:
    """A counter read back: absent is 0; anything but a short decimal is refused."""
    if field is None:
        return 0
    if not isinstance(field, bytes) or len(field) > 20:
        raise InvalidResponse("a counter of the shared store out of shape")
    return int(field)


class SharedCounters:
    """The :class:`~.counters.Counters` of a pod whose sidecars share one server."""

    def __init__(
        self,
        client: Redis,
        *,
        pod: str,
        on_unreachable: OnUnreachable,
        local: LocalCounters,
        metrics: Metrics | None = None,
        today: Callable[[], str] = utc_day,
        timeout_s: float = TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        this_minute: Callable[[], str] = utc_minute,
    ) -> None:
        """``local``: this sidecar's own counters, for ``fail-local``."""
        self._this_minute = this_minute
        self._redis = client
        self._pod = pod
        self.on_unreachable = on_unreachable
        self.local = local
        self._metrics = metrics
        self._today = today
        self._timeout_s = timeout_s
        self._clock = clock
        self._scripts = {
            name: Script(client, text)
            for name, text in (
                ("reserve", RESERVE),
                ("release", RELEASE),
                ("spend", SPEND),
                ("settle", SETTLE),
                ("take", TAKE),
            )
        }
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)  # calls at once: the pool's size
        self.up = True
        self._down_until = 0.0
        self._backoff_s = BACKOFF_S[0]
        self._pending_spend: dict[str, tuple[list[str], list[Any]]] = {}
        self._pending_release: dict[str, list[str]] = {}
        if metrics is not None:
            metrics.shared_limits_up.labels(store=STORE_LABEL).set(1)

    async def start(self) -> None:
        """The scripts loaded before the first request (else the first requests of a cold start
        each load them); a server away now is tried again at the first check."""
        try:
            for script in self._scripts.values():
                await self._bounded(self._redis.script_load(script.text))
        except _Unreachable:
            pass

    # -- the Counters interface ---------------------------------------------------------------

    async def reserve(self, claims: Sequence[Claim], tokens: int, usd: float) -> Hold | Refused:
        day, minute = self._today(), self._this_minute()
        subjects = tuple(claim.subject for claim in claims)
        rated = [claim for claim in claims if claim.per_minute]
        hold_id = uuid.uuid4().hex
        hold = Hold(
            day, subjects, tokens, usd, hold_id, True, minute, tuple(c.subject for c in rated)
        )
        keys = self._hold_keys(hold)
        limits: list[int] = []
        for claim in claims:
            usd_limit = None if claim.usd is None else nano_usd(claim.usd)
            limits += (_limit(claim.tokens), _limit(usd_limit), -1)
            limits.append(day_expiry(day))
        for claim in rated:
            limits += (_limit(claim.tokens_per_minute), -1, _limit(claim.requests_per_minute))
            limits.append(minute_expiry(minute))
        args = [hold.id, max(tokens, 0), nano_usd(usd), HOLD_LEASE_S * 1000]
        try:
            refused = await self._call(
                "reserve", keys, [*args, *limits], lambda r: _integer(r, 0, len(keys) // 2)
            )
        except _Unreachable:
            return self._decide_locally(lambda: self.local.reserve_now(claims, tokens, usd))
        if not refused:
            return hold
        return MINUTE_REFUSED if refused > len(claims) else DAY_REFUSED  # its windows come last

    async def release(self, hold: Hold) -> None:
        if not hold.shared:
            self.local.release_now(hold)
            return
        keys = self._hold_keys(hold)
        try:
            await self._call("release", keys, [hold.id])
        except _Unreachable:
            self._keep_release(hold.id, keys)

    async def spend(self, claims: Sequence[Claim], tokens: int, usd: float) -> None:
        spend_id, keys, args = self._spending(claims, tokens, usd)
        try:
            await self._call("spend", keys, args)
        except _Unreachable:
            self._keep_spend(spend_id, keys, args)
            if self.on_unreachable == "fail-local":
                self.local.spend_now(claims, tokens, usd)

    async def settle(self, hold: Hold, claims: Sequence[Claim], tokens: int, usd: float) -> None:
        if not hold.shared:  # admitted on this sidecar's counts while the store was away
            self.local.release_now(hold)
            await self.spend(claims, tokens, usd)
            return
        hold_keys = self._hold_keys(hold)
        spend_id, keys, args = self._spending(claims, tokens, usd)
        head = [hold.id, len(hold_keys) // 2, *args[:3]]
        try:
            await self._call("settle", [*hold_keys, *keys], [*head, *args[3:]])
        except _Unreachable:
            self._keep_release(hold.id, hold_keys)
            self._keep_spend(spend_id, keys, args)
            if self.on_unreachable == "fail-local":
                self.local.spend_now(claims, tokens, usd)

    def _spending(
        self, claims: Sequence[Claim], tokens: int, usd: float
    ) -> tuple[str, list[str], list[Any]]:
        """A spend's id, and the keys and arguments of its ``SPEND``: each day's window, each
        rated minute's, its marker."""
        day, minute = self._today(), self._this_minute()
        spend_id = uuid.uuid4().hex
        keys = [budget_key(self._pod, c.subject, day) for c in claims]
        expiries = [day_expiry(day)] * len(keys)
        for claim in claims:
            if claim.per_minute:
                keys.append(budget_key(self._pod, claim.subject, minute))
                expiries.append(minute_expiry(minute))
        keys.append(f"{KEY_PREFIX}:spent:{spend_id}")
        return spend_id, keys, [max(tokens, 0), nano_usd(usd), SPEND_MARKER_S, *expiries]

    async def spent(self, subjects: Sequence[str]) -> dict[str, tuple[int, float]]:
        day = self._today()
        keys = [budget_key(self._pod, s, day) for s in subjects]
        try:
            rows = await self._bounded(read_budgets(self._redis, keys))  # shapes checked there
        except _Unreachable:
            if self.on_unreachable == "fail-closed":
                raise SharedLimitsUnavailable from None
            return await self.local.spent(subjects)
        return {s: (row.tokens, row.usd) for s, row in zip(subjects, rows, strict=True)}

    async def take(self, key: RateKey, rate: Rate) -> bool:
        agent, tool, rule = key
        bucket = f"{KEY_PREFIX}:rate:{subject_key(self._pod, agent)}/tool/{tool}/rule/{rule}"
        try:
            admitted, left = await self._call(
                "take", [bucket], [rate.count, rate.period_s * 1000], _rate_answer(rate)
            )
        except _Unreachable:
            return self._decide_locally(lambda: self.local.rates.take_now(key, rate))
        self.local.rates.seen(key, rate, left / 1000)
        return admitted == 1

    def levels(self) -> dict[RateKey, float]:
        return self.local.levels()

    async def close(self) -> None:
        await self._redis.aclose()

    # -- reaching the server ------------------------------------------------------------------

    def _hold_keys(self, hold: Hold) -> list[str]:
        """The windows a hold is in, in pairs: each subject's day, then each rated minute."""
        keys: list[str] = []
        windows = [(s, hold.day) for s in hold.subjects]
        for subject, window in [*windows, *((s, hold.minute) for s in hold.minute_subjects)]:
            keys += (budget_key(self._pod, subject, window), holds_key(self._pod, subject, window))
        return keys

    async def _call(
        self,
        script: str,
        keys: list[str],
        args: list[Any],
        shape: Callable[[Any], T] = lambda reply: reply,
    ) -> T:
        if self._pending_spend or self._pending_release:
            await self._write_pending()
        return await self._bounded(self._scripts[script](keys=keys, args=args), shape)

    async def _bounded(
        self, work: Awaitable[Any], shape: Callable[[Any], T] = lambda reply: reply
    ) -> T:
        """``work`` within ``TIMEOUT_S``, its answer checked by ``shape``; any failure marks the
        server down for a while."""
        if not self.up and self._clock() < self._down_until:
            if asyncio.iscoroutine(work):
                work.close()
            raise _Unreachable
        try:
            async with asyncio.timeout(self._timeout_s), self._slots:
                reply = shape(await work)
        except (RedisError, OSError, TimeoutError, ValueError) as exc:
            self._went_down(exc)
            raise _Unreachable from exc
        self._came_up()
        return reply

    def _went_down(self, exc: BaseException) -> None:
        self._down_until = self._clock() + self._backoff_s
        self._backoff_s = min(self._backoff_s * 2, BACKOFF_S[1])
        if self.up:
            self.up = False
            log.error(
                "shared limits: the store cannot be reached (%s: %.200s); %s until it answers",
                type(exc).__name__,
                exc,
                "refusing what it counts"
                if self.on_unreachable == "fail-closed"
                else "counting in this sidecar alone",
            )
            if self._metrics is not None:
                self._metrics.shared_limits_up.labels(store=STORE_LABEL).set(0)

    def _came_up(self) -> None:
        self._backoff_s = BACKOFF_S[0]
        if not self.up:
            self.up = True
            log.warning("shared limits: the store answers again")
            if self._metrics is not None:
                self._metrics.shared_limits_up.labels(store=STORE_LABEL).set(1)

    def _decide_locally(self, decide: Callable[[], T]) -> T:
        if self.on_unreachable == "fail-closed":
            self._count("refused")
            raise SharedLimitsUnavailable
        self._count("local")
        return decide()

    def _count(self, decision: str) -> None:
        if self._metrics is not None:
            self._metrics.shared_limits_unreachable.labels(decision=decision).inc()

    def _keep_spend(self, spend_id: str, keys: list[str], args: list[Any]) -> None:
        if len(self._pending_spend) >= MAX_PENDING_SPENDS:
            dropped = next(iter(self._pending_spend))
            log.error(
                "shared limits: a spend kept too long is dropped: %s",
                self._pending_spend[dropped][1][:2],
            )
            del self._pending_spend[dropped]
        self._pending_spend[spend_id] = (keys, args)

    def _keep_release(self, hold_id: str, keys: list[str]) -> None:
        if len(self._pending_release) >= MAX_PENDING:  # its lease ends it on the server
            del self._pending_release[next(iter(self._pending_release))]
        self._pending_release[hold_id] = keys

    async def _write_pending(self) -> None:
        """What could not be written while the server was away, once it answers again. Each
        entry is taken before its write, so concurrent checks never write one together; a failed
        write keeps it, and a spend written again counts once (its marker)."""
        while self._pending_spend:
            spend_id, (keys, args) = self._pending_spend.popitem()
            try:
                await self._bounded(self._scripts["spend"](keys=keys, args=args))
            except _Unreachable:
                self._keep_spend(spend_id, keys, args)
                raise
        while self._pending_release:
            hold_id, keys = self._pending_release.popitem()
            try:
                await self._bounded(self._scripts["release"](keys=keys, args=[hold_id]))
            except _Unreachable:
                self._keep_release(hold_id, keys)
                raise


class _Unreachable(Exception):
    """The server did not answer in time, or answered out of shape."""


BUDGET_FIELDS = ("t", "u", "ht", "hu", "lt", "lu")
MAX_FLEET_BUDGETS = 10_000
"""Budgets one fleet view reads at most (a store holding more is named as cut short)."""


class BudgetRow:
    """One budget's counters as the server holds them; a limit is the last one a sidecar
    held a request against (None: none, or not yet seen)."""

    __slots__ = ("held_tokens", "held_usd", "token_limit", "tokens", "usd", "usd_limit")

    def __init__(self, fields: object) -> None:
        if not isinstance(fields, list) or len(fields) != len(BUDGET_FIELDS):
            raise InvalidResponse("a budget of the shared store out of shape")
        tokens, nano, held_tokens, held_nano, token_limit, nano_limit = map(_number, fields)
        self.tokens, self.usd = tokens, nano / NANO_USD
        self.held_tokens, self.held_usd = held_tokens, held_nano / NANO_USD
        self.token_limit = token_limit if fields[4] is not None and token_limit >= 0 else None
        self.usd_limit = (
            nano_limit / NANO_USD if fields[5] is not None and nano_limit >= 0 else None
        )


async def read_budgets(client: Redis, keys: Sequence[str]) -> list[BudgetRow]:
    """Spent, held and limits of each budget key, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hmget(key, list(BUDGET_FIELDS))
    return [BudgetRow(fields) for fields in await pipe.execute()]


async def fleet_budgets(client: Redis, day: str) -> tuple[dict[str, BudgetRow], bool]:
    """Every budget counted on ``day`` by any sidecar of the store, by its name (``group/NAME``
    or ``pod/POD/agent/ID``); and whether there were more than ``MAX_FLEET_BUDGETS``."""
    prefix, suffix = f"{KEY_PREFIX}:budget:", f":{day}"
    keys: list[str] = []
    async for key in client.scan_iter(match=f"{prefix}*{suffix}", count=1000):
        if not isinstance(key, bytes) or len(key) > 1024:
            raise InvalidResponse("a key of the shared store out of shape")
        keys.append(key.decode("utf-8", "replace"))
        if len(keys) > MAX_FLEET_BUDGETS:
            break
    cut = len(keys) > MAX_FLEET_BUDGETS
    keys = sorted(keys[:MAX_FLEET_BUDGETS])
    rows = await read_budgets(client, keys)
    return {key[len(prefix) : -len(suffix)]: row for key, row in zip(keys, rows, strict=True)}, cut
