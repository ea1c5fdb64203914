"""The HTTP side of ``/mcp``: refusals as JSON-RPC errors, content negotiation, SSE framing,
writes to a client that may be gone, and the DNS-rebinding check on Host and Origin."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import orjson
from aiohttp import web

from .protocol import INVALID_REQUEST, error_response

JSON = "application/json"
SSE = "text/event-stream"


class HttpError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.response = jsonrpc_error(status, code, message)


def jsonrpc_error(status: int, code: int, message: str) -> web.Response:
    """A JSON-RPC error answer to a request whose id is unknown (refused before parsing)."""
    return json_response(error_response(None, code, message), status=status)


def json_response(payload: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(payload), content_type=JSON)


def sse_event(data: bytes) -> bytes:
    return b"event: message\ndata: " + data + b"\n\n"


async def write(response: web.StreamResponse, data: bytes) -> bool:
    try:
        await response.write(data)
    except (ConnectionError, RuntimeError):
        return False  # the client went away; the tool call still completes and is audited
    return True


def accepts(request: web.Request) -> tuple[bool, bool]:
    accept = request.headers.get("Accept", "*/*").lower()
    anything = "*/*" in accept
    return (
        anything or JSON in accept or "application/*" in accept,
        anything or SSE in accept or "text/*" in accept,
    )


def check_origin(request: web.Request, allowed_hosts: frozenset[str]) -> None:
    """DNS rebinding (MCP transport rules): a page from elsewhere can point its own name at
    the sidecar, so Origin and Host agree with each other; both must be one of the sidecar's
    own names (sidecar.json ``allowed_hosts``, any port)."""
    if hostname(request.headers.get("Host", "")) not in allowed_hosts:
        raise HttpError(403, INVALID_REQUEST, "Forbidden: Host is not one of the sidecar's names")
    origin = request.headers.get("Origin")
    if origin is not None and hostname(urlsplit(origin).netloc) not in allowed_hosts:
        raise HttpError(403, INVALID_REQUEST, "Forbidden: cross-origin request")


def hostname(authority: str) -> str | None:
    """``host[:port]`` -> the host, lower-cased (IPv6 without brackets); None if malformed."""
    try:
        return urlsplit("//" + authority.strip()).hostname
    except ValueError:
        return None
