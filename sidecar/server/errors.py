"""Errors in the caller's protocol: OpenAI and Anthropic shapes, plain and mid-stream."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Literal

import orjson
from aiohttp import web

if TYPE_CHECKING:
    from clawpod.sidecar.server.exchange import Exchange

Api = Literal["openai", "anthropic"]
JSON_HEADERS = {"Content-Type": "application/json"}

# Anthropic's error type names double as our `type` vocabulary; OpenAI clients only read
# `message`/`code` and branch on the HTTP status, so one vocabulary serves both shapes.
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    502: "upstream_error",
    504: "timeout_error",
}


class ApiError(Exception):
    """An error the client is told about, in its protocol's shape."""

    def __init__(self, status: int, code: str, message: str, type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.type = type or _TYPE_BY_STATUS.get(status, "api_error")


def error_body(api: Api, err: ApiError) -> dict[str, Any]:
    if api == "anthropic":
        # `code` is an addition to Anthropic's shape so callers can branch on our error codes.
        error = {"type": err.type, "message": err.message, "code": err.code}
        return {"type": "error", "error": error}
    return {"error": {"message": err.message, "type": err.type, "code": err.code}}


def error_json(api: Api, err: ApiError) -> bytes:
    return orjson.dumps(error_body(api, err))


async def reply_error(exchange: Exchange, api: Api, err: ApiError) -> None:
    """Tell the client about ``err``: a whole error response, or, when the response head is
    already gone, the protocol's in-band stream error that ends the body."""
    with contextlib.suppress(ConnectionError):
        if exchange.started:
            await exchange.write(stream_error_bytes(api, err))
            await exchange.end()
        else:
            await exchange.respond(err.status, error_json(api, err), JSON_HEADERS)


def stream_error_bytes(api: Api, err: ApiError) -> bytes:
    data = orjson.dumps(error_body(api, err))
    if api == "anthropic":
        return b"event: error\ndata: " + data + b"\n\n"
    return b"data: " + data + b"\n\n"


def jsonrpc_error_response(status: int, code: int, message: str) -> web.Response:
    """For /mcp: a JSON-RPC error object (no request id is known before authentication)."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")
