"""Governed pass-through: the client's request goes upstream unchanged, the answer comes back
unchanged (streams chunk by chunk, never buffered), and the exchange is audited."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import web

from sidecar.server.accounting import record_request, usage_record
from sidecar.server.context import RequestContext
from sidecar.server.errors import ApiError, error_response, start_response, stream_error_bytes
from sidecar.server.upstream import UpstreamError, response_headers, translate_error
from sidecar.server.usage import StreamUsage, usage_from_body
from sidecar.transport import Response, TransportError


def upstream_api_error(exc: UpstreamError) -> ApiError:
    if exc.kind == "timeout":
        return ApiError(504, "upstream_timeout", exc.message)
    if exc.kind == "unreachable":
        return ApiError(502, "upstream_unreachable", exc.message)
    return ApiError(502, "upstream_protocol_error", exc.message)


async def pass_through(request: web.Request, ctx: RequestContext, raw: bytes) -> web.StreamResponse:
    sent = time.monotonic()
    try:
        upstream = await ctx.state.upstream.send(ctx, raw)
    except UpstreamError as exc:
        return await _fail(request, ctx, upstream_api_error(exc))
    try:
        ctx.state.metrics.observe_upstream(ctx.provider_name, time.monotonic() - sent)
        if upstream.status == 200 and upstream.content_type == "text/event-stream":
            if not ctx.stream:
                # The client asked for one JSON body; a stream would break its SDK.
                message = f"provider {ctx.provider_name!r} streamed an answer nobody asked for"
                err = ApiError(502, "upstream_protocol_error", message)
                return await _fail(request, ctx, err)
            return await _relay_stream(request, ctx, upstream)
        return await _relay_body(request, ctx, upstream)
    finally:
        upstream.release()


async def _relay_body(
    request: web.Request, ctx: RequestContext, upstream: Response
) -> web.StreamResponse:
    try:
        data = await upstream.read()
    except TransportError as exc:
        failure = translate_error(exc, ctx.provider_name)
        return await _fail(request, ctx, upstream_api_error(failure))
    status = upstream.status
    if status >= 400:
        data = ctx.state.upstream.redact(ctx.provider_name, data)
    parsed = _json_or_none(data)
    if status >= 400:
        if not _is_protocol_error(parsed):
            return await _fail(request, ctx, _wrapped_upstream_error(ctx, status, data))
        error_code = f"upstream_http_{status}"
        usage = usage_record(rounds=1)
    elif parsed is None and status == 200:
        err = ApiError(
            502,
            "upstream_protocol_error",
            f"provider {ctx.provider_name!r} returned a response body that is not JSON",
        )
        return await _fail(request, ctx, err)
    else:
        error_code = None
        usage = usage_record(*usage_from_body(ctx.api, parsed), rounds=1)
    response = web.Response(status=status, body=data, headers=response_headers(upstream.headers))
    await _send(request, response)
    await record_request(ctx, http_status=status, error_code=error_code, usage=usage)
    return response


async def _relay_stream(
    request: web.Request, ctx: RequestContext, upstream: Response
) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers=response_headers(upstream.headers))
    await start_response(request, response)
    usage = StreamUsage(ctx.api)
    end_marker = _STREAM_END[ctx.api]
    tail = b""  # enough of the last bytes to spot an end marker split across chunks
    error_code: str | None = None
    try:
        while True:
            try:
                chunk = await upstream.read_chunk()
            except TransportError as exc:
                err = upstream_api_error(translate_error(exc, ctx.provider_name))
                error_code = err.code
                await response.write(stream_error_bytes(ctx.api, err))
                break
            if not chunk:
                if end_marker not in tail:
                    # A cut stream must not look like a complete answer to the client.
                    message = f"provider {ctx.provider_name!r} ended the stream before its end"
                    err = ApiError(502, "upstream_protocol_error", message)
                    error_code = err.code
                    await response.write(stream_error_bytes(ctx.api, err))
                break
            usage.feed(chunk)
            if end_marker not in tail:
                tail = tail[-len(end_marker) :] + chunk
            await response.write(chunk)
        await response.write_eof()
    except ConnectionError:
        error_code = "client_disconnected"
    except asyncio.CancelledError:
        _record_later(ctx, "client_disconnected", usage)
        raise
    await record_request(
        ctx,
        http_status=200,
        error_code=error_code,
        usage=usage_record(usage.input_tokens, usage.output_tokens, rounds=1),
    )
    return response


async def _fail(request: web.Request, ctx: RequestContext, err: ApiError) -> web.StreamResponse:
    response = error_response(ctx.api, err)
    await _send(request, response)
    # A pass-through is one upstream call, answered or not.
    await record_request(
        ctx, http_status=err.status, error_code=err.code, usage=usage_record(rounds=1)
    )
    return response


async def _send(request: web.Request, response: web.Response) -> None:
    """Send the whole response now, so the audit write that follows adds no client latency."""
    try:
        await start_response(request, response)
        await response.write_eof()
    except ConnectionError:
        pass  # the client left; the exchange is still audited


def _record_later(ctx: RequestContext, code: str, usage: StreamUsage) -> None:
    usage_now = usage_record(usage.input_tokens, usage.output_tokens, rounds=1)
    task = asyncio.get_running_loop().create_task(
        record_request(ctx, http_status=200, error_code=code, usage=usage_now)
    )
    _background.add(task)
    task.add_done_callback(_background.discard)


_background: set[asyncio.Task[None]] = set()
# What a complete stream carries last: OpenAI's [DONE] sentinel, Anthropic's message_stop event.
_STREAM_END = {"openai": b"[DONE]", "anthropic": b"message_stop"}


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
    message = f"provider {ctx.provider_name!r} answered HTTP {status}"
    if snippet:
        message += f": {snippet}"
    return ApiError(status if status < 600 else 502, f"upstream_http_{status}", message)
