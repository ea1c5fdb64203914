"""One model call over a request's targets and each target's keys (SPEC §14).

The next key of the same provider is tried after a 429 about the key (it rests), a 429 that
says nothing of whose it is (no rest) or a 401/402 (the key rests, and repeated is out until
restart); a 429 the request caused (larger than the key's whole limit) and every other 4xx are
the agent's answer, tried on no other key or target. The next target is tried after a
connection failure, a 5xx, a 429 with no key left, or no first byte within the provider's
``first-byte-timeout-ms``. All of that happens before anything reaches the client (a
stream that breaks after text is continued by ``stream_failover.py``): what is returned is the
one answer the caller relays, and a stream's first chunk is already read when a first-byte
timeout applies. Each attempt is recorded (provider, key label, outcome) for the audit record
and counted for the metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from ...model.errors import ApiError
from ...transport import BodyTooLarge, Response, TransportError
from ..providers.key_pool import (
    KEY_REFUSED,
    MAX_EVIDENCE_BYTES,
    Blame,
    KeyPool,
    PoolKey,
    blame_429,
    retry_after_header,
    retry_after_s,
)
from ..providers.upstream import UpstreamError, UpstreamTarget, translate_error

if TYPE_CHECKING:
    from ...manifest import Provider
    from ..request.exchange import RequestContext

R = TypeVar("R", Response, None)
# Sends the request to one target with the model id that target knows it by.
Send = Callable[[UpstreamTarget, str | None], Awaitable[Response]]


class FirstByteTimeout(UpstreamError):
    """The provider sent nothing within its ``first-byte-timeout-ms``."""


class FirstChunk:
    """A streamed answer whose first chunk was read to see a first byte in time; it reads
    like the response it wraps."""

    __slots__ = ("_first", "_response")

    def __init__(self, response: Response, first: bytes) -> None:
        self._response = response
        self._first = first

    def __getattr__(self, name: str) -> object:
        return getattr(self._response, name)

    async def read_chunk(self) -> bytes:
        if self._first:
            first, self._first = self._first, b""
            return first
        return await self._response.read_chunk()

    async def read(self, max_bytes: int | None = None) -> bytes:
        first, self._first = self._first, b""
        if max_bytes is not None:
            if len(first) > max_bytes:
                raise BodyTooLarge(max_bytes)
            max_bytes -= len(first)
        return first + await self._response.read(max_bytes)


async def open_upstream(ctx: RequestContext, send: Send) -> Response:
    """The first usable answer among the request's targets; sets ``ctx.ledger.provider_name`` and
    ``ctx.ledger.model`` to the target that gave it. Raises ``UpstreamError`` when the last target
    could not be reached, ``ApiError`` 429 when every key rests. Attempts are recorded in
    ``ctx.ledger.attempts`` when there was a choice (a route, a key pool, a first-byte bound)."""
    if not ctx.routing.walks:
        # One provider, one key, no first-byte bound (``RoutePlan.walks``): the plain path,
        # and nothing to record that the audit record's ``provider`` does not say.
        name, _, model = ctx.routing.targets[0]
        return await send(ctx.target(name), model)
    return await _walk(ctx, send)


async def _walk(ctx: RequestContext, send: Send) -> Response:
    upstream = ctx.state.upstream
    last = len(ctx.routing.targets) - 1
    for index, (name, provider, model) in enumerate(ctx.routing.targets):
        pool = upstream.pools[name]
        final = index == last
        tried: set[str] = set()
        # A 429 that says nothing of the key: the next key is tried, and this is the answer
        # when none is left.
        unblamed: Response | None = None
        while True:
            key = pool.take() if pool.pooled else pool.keys[0]
            if key is None or key.label in tried:
                if unblamed is not None:
                    if final:
                        return _served(ctx, name, model, unblamed)
                    _fail_over(ctx, name, "http_429", unblamed)
                else:
                    ctx.ledger.attempts.append(_attempt(name, None, "no_key_ready"))
                break
            tried.add(key.label)
            target = ctx.target(name, key.label if pool.pooled else None)
            try:
                response = await _first_byte(provider, name, send(target, model))
            except UpstreamError as exc:
                outcome = "first_byte_timeout" if isinstance(exc, FirstByteTimeout) else exc.kind
                ctx.ledger.attempts.append(_attempt(name, key.label, outcome))
                if unblamed is not None:
                    unblamed.release()
                if final:
                    _served(ctx, name, model, None)  # the record names who failed last
                    raise
                ctx.state.metrics.count_failover(name, outcome)
                break
            status = response.status
            blame: Blame | None = None
            if status == 429:
                response, blame = await _blamed(response)
            if blame == "request":  # every key and target would refuse it: the agent's alone
                ctx.ledger.attempts.append(_attempt(name, key.label, "request_refused"))
                return _served(ctx, name, model, _instead_of(unblamed, response))
            if pool.pooled and (blame == "key" or status in KEY_REFUSED):
                exhausted = _key_failed(ctx, pool, key, name, response)
                if exhausted and final and status != 429:
                    return _served(ctx, name, model, _instead_of(unblamed, response))
                response.release()
                continue
            if pool.pooled and blame == "unknown":
                ctx.ledger.attempts.append(_attempt(name, key.label, "http_429"))
                _instead_of(unblamed, None)
                unblamed = response
                continue
            if not final and (status >= 500 or status == 429):
                _instead_of(unblamed, None)
                ctx.ledger.attempts.append(_attempt(name, key.label, f"http_{status}"))
                _fail_over(ctx, name, f"http_{status}", response)
                break
            if pool.pooled and status < 400:
                pool.served(key)
            ctx.ledger.attempts.append(_attempt(name, key.label, _status_outcome(response)))
            return _served(ctx, name, model, _instead_of(unblamed, response))
    raise _keys_resting(ctx)


def _fail_over(ctx: RequestContext, name: str, outcome: str, response: Response) -> None:
    """The route's next target takes the call from ``name``, whose answer is let go."""
    ctx.state.metrics.count_failover(name, outcome)
    response.release()


def _instead_of(kept: Response | None, response: R) -> R:
    """``response``, releasing an earlier answer kept in case none came."""
    if kept is not None:
        kept.release()
    return response


async def _blamed(response: Response) -> tuple[Response, Blame]:
    """A 429 read for evidence of whose fault it is (``blame_429``); what was read is still
    the caller's to relay."""
    body = b""
    try:
        while len(body) < MAX_EVIDENCE_BYTES and (chunk := await response.read_chunk()):
            body += chunk
    except TransportError:
        return FirstChunk(response, body), "unknown"  # type: ignore[return-value]
    return FirstChunk(response, body), blame_429(response.headers, body)  # type: ignore[return-value]


def _key_failed(
    ctx: RequestContext, pool: KeyPool, key: PoolKey, provider: str, response: Response
) -> bool:
    """Rest or retire a key its provider refused; True when the pool has no usable key left."""
    if response.status == 429:
        pool.rest(key, retry_after_s(response.headers))
        event = "rate_limited"
    else:
        pool.refused(key)
        event = "key_refused"
    ctx.ledger.attempts.append(_attempt(provider, key.label, event))
    ctx.state.metrics.count_key_event(provider, key.label, event)
    return not pool.usable()


def _served(ctx: RequestContext, name: str, model: str | None, response: R) -> R:
    ctx.ledger.provider_name, ctx.ledger.model = name, model
    return response


async def _first_byte(provider: Provider, name: str, sending: Awaitable[Response]) -> Response:
    """The answer's head, and for a stream its first chunk, within the provider's bound."""
    if provider.first_byte_timeout_ms is None:
        return await sending
    response: Response | None = None
    try:
        async with asyncio.timeout(provider.first_byte_timeout_ms / 1000):
            response = await sending
            if response.status == 200 and response.content_type == "text/event-stream":
                return FirstChunk(response, await response.read_chunk())  # type: ignore[return-value]
            return response
    except TimeoutError:
        if response is not None:
            response.release()
        message = f"provider {name!r} sent no first byte within its first-byte-timeout-ms"
        raise FirstByteTimeout("timeout", message) from None
    except TransportError as exc:
        assert response is not None
        response.release()
        raise translate_error(exc, name) from exc


def _keys_resting(ctx: RequestContext) -> ApiError:
    """Every key of every target rests (or is out): a 429 that says when to come back."""
    pools = [ctx.state.upstream.pools[name] for name, _, _ in ctx.routing.targets]
    waits = [w for w in (p.seconds_until_ready() for p in pools) if w is not None]
    names = ", ".join(dict.fromkeys(name for name, _, _ in ctx.routing.targets))
    if not waits:
        return ApiError(
            502,
            "no_usable_key",
            f"every key of {names} was refused by its provider; the operator must replace them",
            headers={"x-should-retry": "false"},
        )
    return ApiError(
        429,
        "provider_keys_resting",
        f"every key of {names} is rate-limited; try again later",
        "rate_limit_error",
        headers={"retry-after": retry_after_header(min(waits))},
    )


def _status_outcome(response: Response) -> str:
    return "ok" if response.status < 400 else f"http_{response.status}"


def _attempt(provider: str, key: str | None, outcome: str) -> dict[str, str | None]:
    return {"provider": provider, "key": key, "outcome": outcome}
