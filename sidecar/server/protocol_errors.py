"""The middleware that answers every failure on aiohttp's routes in the caller's protocol
(JSON-RPC on ``/mcp``, the codec's error shape elsewhere), with nothing internal leaked."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from ..codecs import codec_for_caller
from ..mcp.http import jsonrpc_error
from ..model.errors import ApiError, internal_error
from ..observability.logs import log_request
from .auth import AuthError
from .errors import JSON_HEADERS

log = logging.getLogger(__name__)
JSONRPC_INTERNAL_ERROR = -32603
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def protocol_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves in the caller's protocol shape; nothing internal leaks."""
    try:
        return await handler(request)
    except AuthError as err:
        log_request(route=request.path, status=err.status, code=err.code, agent=None)
        return _error_reply(request, err)
    except ApiError as err:
        return _error_reply(request, err)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error_reply(request, _from_http_exception(exc))
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return _error_reply(request, internal_error())


def _error_reply(request: web.Request, err: ApiError) -> web.Response:
    if request.path == "/mcp":
        return jsonrpc_error(err.status, JSONRPC_INTERNAL_ERROR, err.message)
    codec = codec_for_caller(request.path, request.headers)
    return web.Response(status=err.status, body=codec.error_json(err), headers=JSON_HEADERS)


def _from_http_exception(exc: web.HTTPException) -> ApiError:
    codes = {
        400: "bad_request",
        404: "not_found",
        405: "method_not_allowed",
        413: "request_too_large",
        431: "request_header_fields_too_large",
        503: "overloaded",
    }
    message = {
        404: "no such route",
        405: "method not allowed on this route",
    }.get(exc.status, exc.reason)
    return ApiError(exc.status, codes.get(exc.status, f"http_{exc.status}"), message)
