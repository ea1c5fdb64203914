"""Governed pass-through: the client's request goes upstream unchanged, the answer comes back
unchanged (streams chunk by chunk, never buffered), and the exchange is audited.

A stream that breaks after text goes on at the route's next target (``stream_failover.py``).
A request whose route has one plain target (``RoutePlan.walks`` false) is sent to it directly;
one with no target of another protocol (no ``ctx.routing.translations``) never meets translation."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Coroutine
from typing import Any

import orjson

from ...audit.log import usage_record
from ...codecs.usage import StreamUsage
from ...model.errors import ApiError, upstream_failure
from ...model.token_estimate import reply_tokens
from ...observability import tracing
from ...state.stored_objects import StoredRef, StreamedIds, refs
from ...transport import Response, TransportError
from ..accounting.accounting import (
    Call,
    calls_cost,
    estimated_usage,
    record_request,
    stream_usage,
    with_spent,
)
from ..failover import stream_failover
from ..failover.failover import open_upstream
from ..providers.unserved import NO_SUCH_ROUTE, NOT_SERVED, not_served_message
from ..providers.upstream import (
    UpstreamError,
    UpstreamTarget,
    translate_error,
)
from ..request.errors import reply_error
from ..request.exchange import Exchange, RequestContext
from ..translated import translated, translated_stream


def upstream_api_error(exc: UpstreamError) -> ApiError:
    return upstream_failure(exc.kind, exc.message)


def pass_through(
    exchange: Exchange, ctx: RequestContext, raw: bytes | bytearray | None
) -> Coroutine[Any, Any, None]:
    """The pass-through of ``ctx``'s request, in a model span while tracing is on."""
    if tracing.tracer is None:
        return _pass_through(exchange, ctx, raw)  # no coroutine around it: one frame less
    return _traced(exchange, ctx, raw)


async def _traced(exchange: Exchange, ctx: RequestContext, raw: bytes | bytearray | None) -> None:
    with tracing.model_span(ctx.caller.codec.api, ctx.ledger.model):
        await _pass_through(exchange, ctx, raw)


async def _pass_through(
    exchange: Exchange, ctx: RequestContext, raw: bytes | bytearray | None
) -> None:
    sent = time.monotonic()
    client = ctx.state.upstream

    def send(target: UpstreamTarget, model: str | None) -> Awaitable[Response]:
        if ctx.routing.translations is not None:
            live = translated_stream.passthrough_streamed(ctx, target, model)
            if live is not None:  # a streaming caller, a provider of another protocol: live
                return client.send(*live)
            crossing = translated.passthrough_send(ctx, target, model)
            if crossing is not None:  # a provider of another protocol (contract §18)
                return client.send(*crossing, max_body_bytes=client.max_response_bytes)
        same = model is None or model == ctx.ledger.model
        return client.send(target, raw if same else _with_model(raw, model))

    try:
        if ctx.routing.walks:
            upstream = await open_upstream(ctx, send)
        else:  # the plain path of ``open_upstream``, without entering it
            upstream = await send(ctx.target(ctx.ledger.provider_name or ""), ctx.ledger.model)
    except UpstreamError as exc:
        return await _fail(exchange, ctx, upstream_api_error(exc))
    except ApiError as err:  # every key rests
        return await _fail(exchange, ctx, err)
    try:
        ctx.state.metrics.observe_upstream(ctx.ledger.provider_name, time.monotonic() - sent)
        translation = None if ctx.routing.translations is None else translated.answered_in(ctx)
        if translation is not None and translated_stream.streams_back(ctx, upstream):
            return await translated_stream.relay_translated_stream(
                exchange, ctx, upstream, translation, raw
            )
        if translation is not None:
            return await translated.relay_translated(exchange, ctx, upstream, translation)
        if upstream.status == 200 and upstream.content_type == "text/event-stream":
            if not ctx.routing.stream:
                # The client asked for one JSON body; a stream would break its SDK.
                message = (
                    f"provider {ctx.ledger.provider_name!r} streamed an answer nobody asked for"
                )
                err = ApiError(502, "upstream_protocol_error", message)
                return await _fail(exchange, ctx, err)
            return await _relay_stream(exchange, ctx, upstream, raw)
        return await _relay_body(exchange, ctx, upstream)
    finally:
        upstream.release()


async def _relay_body(exchange: Exchange, ctx: RequestContext, upstream: Response) -> None:
    try:
        # A JSON answer is held whole to be audited and relayed: bounded as any other (a
        # non-streamed answer was bounded only once it crossed protocols).
        data = await upstream.read(ctx.state.upstream.max_response_bytes)
    except TransportError as exc:
        failure = translate_error(exc, ctx.ledger.provider_name)
        return await _fail(exchange, ctx, upstream_api_error(failure))
    status = upstream.status
    if status >= 400:
        data = ctx.state.upstream.redact(ctx.ledger.provider_name, data)
    unserved = (
        status in NO_SUCH_ROUTE
        and ctx.routing.upstream_path is None
        and not_served_message(ctx.caller.codec, ctx.ledger.provider_name or "", status, data)
    )
    if unserved:
        return await _fail(exchange, ctx, upstream_failure(NOT_SERVED, unserved))
    parsed = _json_or_none(data)
    if status >= 400:
        if not _is_protocol_error(parsed):
            return await _fail(exchange, ctx, _wrapped_upstream_error(ctx, status, data))
        error_code = f"upstream_http_{status}"
        usage = usage_record(rounds=1)
    elif parsed is None and status == 200:
        err = ApiError(
            502,
            "upstream_protocol_error",
            f"provider {ctx.ledger.provider_name!r} returned a response body that is not JSON",
        )
        return await _fail(exchange, ctx, err)
    else:
        error_code = None
        usage = usage_record(rounds=1)
        if not ctx.routing.upstream_path:  # a stored object's usage was spent when it was made
            usage = _body_usage(ctx, parsed, len(data))
        if ctx.caller.codec.stores_objects:
            _track_stored_objects(ctx, status, parsed)
    headers = ctx.state.upstream.relayed_headers(ctx.ledger.provider_name, upstream.headers)
    # The whole response now, so the audit write that follows adds no client latency; a client
    # that left is still audited.
    with contextlib.suppress(ConnectionError):
        await exchange.respond(status, data, headers)
    await record_request(ctx, http_status=status, error_code=error_code, usage=usage)


async def _relay_stream(
    exchange: Exchange, ctx: RequestContext, upstream: Response, raw: bytes | bytearray | None
) -> None:
    await exchange.start_stream(
        200, ctx.state.upstream.relayed_headers(ctx.ledger.provider_name, upstream.headers)
    )
    redactor = ctx.state.upstream.stream_redactor(ctx.ledger.provider_name)
    stored = StreamedIds(ctx.caller.codec) if ctx.caller.codec.stores_objects else None
    usage = StreamUsage(ctx.caller.codec)
    stripper = ctx.caller.codec.usage_stripper() if ctx.ledger.strip_usage else None
    end = ctx.caller.codec.end_watch()
    # While the answer could go on at the route's next target (``stream_failover``).
    watch = stream_failover.watch_for(ctx)
    splice: stream_failover.Splice | None = None
    spent: list[Call] = []  # the stream that broke and was continued
    finished = False
    error_code: str | None = None
    # The stream's status as the audit tells it: 200 went out before it failed, if it did.
    status = 200
    try:
        while True:
            cut: ApiError | None = None
            try:
                chunk, broken = await upstream.read_chunk(), False
            except TransportError as exc:
                chunk, broken = b"", True
                cut = upstream_api_error(translate_error(exc, ctx.ledger.provider_name))
            if not chunk and cut is None and not end.seen and error_code is None:
                # A cut stream must not look like a complete answer to the client.
                message = f"provider {ctx.ledger.provider_name!r} ended the stream before its end"
                cut = ApiError(502, "upstream_protocol_error", message)
            if cut is not None and watch is not None:
                broke = (
                    ctx.ledger.provider_name,
                    ctx.ledger.model,
                    stream_usage(ctx, usage, False),
                )
                # The next target may speak another protocol: read back in the caller's.
                crossing = (
                    translated_stream.LiveCall(ctx, ctx.caller.codec)
                    if ctx.routing.translations
                    else None
                )
                more = await stream_failover.reopen(ctx, watch, raw, cut.code, crossing)
                if more is not None:
                    more = crossing.caller_stream(more) if crossing is not None else more
                    spent.append(broke)
                    upstream.release(reuse=False)
                    upstream, usage, end = (
                        more,
                        StreamUsage(ctx.caller.codec),
                        ctx.caller.codec.end_watch(),
                    )
                    redactor = ctx.state.upstream.stream_redactor(ctx.ledger.provider_name)
                    splice, watch = stream_failover.Splice(ctx.caller.codec.name, watch), None
                    continue
            if not chunk and not broken:
                if rest := _spliced(splice, redactor.flush()):
                    await exchange.write(rest if stripper is None else stripper.feed(rest))
                if stripper is not None:
                    await exchange.write(stripper.flush())
                finished = end.seen
            if cut is not None:
                status, error_code = cut.status, cut.code
                await exchange.write(ctx.caller.codec.stream_error(cut))
            if not chunk:
                break
            if error_code is None and STREAM_ERROR.search(chunk):
                status, error_code = 502, "upstream_stream_error"  # the provider's, relayed
            usage.feed(chunk)
            if stored is not None and stored.feed(chunk):
                ctx.record_objects(stored.found)  # at once: a client may leave after it
            whole = end.feed(chunk)  # the provider's end marker, read before any redaction
            chunk = _spliced(splice, redactor.feed(chunk))
            if not chunk:
                continue  # the rest of an event: it goes out with its end
            if watch is not None:
                watch.feed(ctx.caller.codec.name, chunk)
            await exchange.write(chunk if stripper is None else stripper.feed(chunk))
            finished = whole  # once the end marker has reached the client
        await exchange.end()
    except ConnectionError:
        # A client that closes once the answer is complete (SDKs stop at the end event) got it.
        error_code = None if finished else "client_disconnected"
    except asyncio.CancelledError:
        _record_later(ctx, None if finished else "client_disconnected", usage, spent, end.seen)
        raise
    finally:
        # Whatever the HTTP framing said, a stream cut short leaves the connection's state
        # unknown: it is closed, never handed to the next request (of any agent).
        upstream.release(reuse=end.seen)
    usage_now = stream_usage(ctx, usage, end.seen)
    await record_request(
        ctx,
        http_status=status,
        error_code=error_code,
        usage=with_spent(usage_now, spent),
        cost=calls_cost(ctx, usage_now, spent),
    )


def _spliced(splice: stream_failover.Splice | None, released: bytes) -> bytes:
    return released if splice is None or not released else splice.feed(released)


async def _fail(exchange: Exchange, ctx: RequestContext, err: ApiError) -> None:
    await reply_error(exchange, ctx.caller.codec, err)  # before the audit write: no added latency
    # A pass-through is one upstream call, answered or not.
    await record_request(
        ctx, http_status=err.status, error_code=err.code, usage=usage_record(rounds=1)
    )


def _track_stored_objects(ctx: RequestContext, status: int, parsed: Any) -> None:
    """Bind what the provider stored to the request's owner; forget what it deleted."""
    if status != 200:
        return
    if ctx.routing.method == "DELETE":
        # Only the object the answer says is deleted (deleting a conversation's item keeps it).
        deleted = parsed.get("id") if isinstance(parsed, dict) and parsed.get("deleted") else None
        for ref in ctx.ledger.objects:
            if ref["use"] == "referenced" and ref["id"] == deleted:
                ctx.state.objects.forget(ctx.caller.owner, StoredRef(ref["kind"], ref["id"]))
        return
    ctx.record_objects(refs(ctx.caller.codec.stored_ids(parsed)))


# An error event in any protocol's stream: Anthropic's and Responses' ``event: error``, a Chat
# Completions ``data: {"error": …}`` (OpenAI, llama-cpp-python). (A Responses stream that ends
# ``response.failed`` is a complete answer, the model's failure.)
STREAM_ERROR = re.compile(rb'^(?:event: ?error\r?$|data: ?\{\s*"error"\s*:)', re.MULTILINE)


def _record_later(
    ctx: RequestContext, code: str | None, usage: StreamUsage, spent: list[Call], complete: bool
) -> None:
    usage_now = stream_usage(ctx, usage, complete)
    recording = record_request(
        ctx,
        http_status=200,
        error_code=code,
        usage=with_spent(usage_now, spent),
        cost=calls_cost(ctx, usage_now, spent),
    )
    ctx.state.tasks.spawn(recording)


def _body_usage(ctx: RequestContext, body: Any, answer_bytes: int) -> dict[str, int]:
    usage = body.get("usage") if isinstance(body, dict) else None
    read, creation = ctx.caller.codec.cache_counts(usage)
    tokens = ctx.caller.codec.usage_counts(usage)
    if not any(tokens) and ctx.caller.route == ctx.caller.codec.route:  # side routes spend nothing
        return estimated_usage(ctx, reply_tokens(body, ctx.caller.codec.name))
    return usage_record(*tokens, rounds=1, cache_read=read, cache_creation=creation)


def _with_model(raw: bytes | None, model: str | None) -> bytes | None:
    """The request for a fallback target that knows the model by another id."""
    if raw is None:
        return None
    return orjson.dumps({**orjson.loads(raw), "model": model})


def _json_or_none(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _is_protocol_error(parsed: Any) -> bool:
    return isinstance(parsed, dict) and isinstance(parsed.get("error"), dict)


def _wrapped_upstream_error(ctx: RequestContext, status: int, data: bytes) -> ApiError:
    """An upstream error whose body is not in the protocol's shape (a proxy page, plain text)."""
    snippet = data[:200].decode("utf-8", "replace").strip()
    message = f"provider {ctx.ledger.provider_name!r} answered HTTP {status}"
    if snippet:
        message += f": {snippet}"
    return ApiError(status if status < 600 else 502, f"upstream_http_{status}", message)
