"""MCP 2026-07-28 on ``/mcp`` (§11.3): the stateless era. No ``initialize`` and no session;
every request carries its protocol version and client capabilities in ``params._meta``, and the
routing headers ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` must repeat the body.

Which era a request belongs to is decided per request: a body that carries the per-request
version, or a ``MCP-Protocol-Version`` header naming no handshake-era version, is stateless;
everything else (``initialize``, session requests) is the session era.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from typing import Any

from .protocol import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_INFO,
    SUPPORTED_VERSIONS,
    Message,
)

STATELESS_VERSIONS = ("2026-07-28",)
VERSION_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
ROUTING_HEADERS = frozenset(h.lower() for h in (VERSION_HEADER, METHOD_HEADER, NAME_HEADER))
VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"
# The params field each name-bearing method mirrors in Mcp-Name.
NAMED_PARAMS = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    # SEP-2663: task requests name their task, so a router can find the instance holding it.
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022
# The HTTP status each JSON-RPC error code answers with in this era.
ERROR_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}
# How long a client may reuse tools/list and server/discover: the grants change only with a new
# build (a restart), a quarantine with the next ttl check.
LISTING_TTL_MS = 60000
_BASE64_SENTINEL = re.compile(r"^=\?base64\?(.*)\?=$")


class Rejected(Exception):
    """A stateless request refused before it runs: a JSON-RPC error with its HTTP status."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    @property
    def status(self) -> int:
        return ERROR_STATUS.get(self.code, 400)


def is_stateless(header_version: str | None, messages: list[Message]) -> bool:
    if header_version is not None and header_version not in SUPPORTED_VERSIONS:
        return True
    return any(m.method != "initialize" and VERSION_META_KEY in _meta(m) for m in messages)


def _meta(message: Message) -> dict[str, Any]:
    params = message.params
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta if isinstance(meta, dict) else {}


def check_request(message: Message, headers: Iterable[tuple[str, str]]) -> str:
    """The request's protocol version once its envelope and routing headers agree with the
    body; raises :class:`Rejected` otherwise."""
    meta = _meta(message)
    routing = _routing_headers(headers)
    header_version = routing.get(VERSION_HEADER.lower())
    if VERSION_META_KEY not in meta and header_version not in STATELESS_VERSIONS:
        # Neither era speaks this version: say so rather than which envelope keys are missing.
        raise _unsupported(header_version)
    missing = [key for key in (VERSION_META_KEY, CAPABILITIES_META_KEY) if key not in meta]
    if missing:
        raise Rejected(
            INVALID_PARAMS,
            f"Invalid params: params._meta must carry {', '.join(missing)} (MCP 2026-07-28)",
        )
    version = meta[VERSION_META_KEY]
    if header_version != version:
        raise _mismatch(f"{VERSION_HEADER} header does not match params._meta {VERSION_META_KEY}")
    if routing.get(METHOD_HEADER.lower()) != message.method:
        raise _mismatch(f"{METHOD_HEADER} header does not match the request's method")
    named = NAMED_PARAMS.get(message.method or "")
    params = message.params if isinstance(message.params, dict) else {}
    named_value = params.get(named) if named is not None else None
    if named_value is not None and _header_text(routing.get(NAME_HEADER.lower())) != named_value:
        raise _mismatch(f"{NAME_HEADER} header does not match params.{named}")
    if not isinstance(version, str) or version not in STATELESS_VERSIONS:
        raise _unsupported(version)
    return version


def _unsupported(version: Any) -> Rejected:
    return Rejected(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version {version!r}; supported: "
        f"{', '.join((*STATELESS_VERSIONS, *SUPPORTED_VERSIONS))}",
        {"supported": [*STATELESS_VERSIONS, *SUPPORTED_VERSIONS], "requested": version},
    )


def _mismatch(message: str) -> Rejected:
    return Rejected(HEADER_MISMATCH, f"Header mismatch: {message}")


def _routing_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        if key in ROUTING_HEADERS:
            if key in found:
                # First-copy and last-copy readers would disagree: neither is trusted.
                raise _mismatch(f"{name} header appears more than once")
            found[key] = value
    return found


def _header_text(value: str | None) -> str | None:
    """A header value, decoding the ``=?base64?...?=`` form used for non-ASCII names."""
    if value is None:
        return None
    sentinel = _BASE64_SENTINEL.match(value)
    if sentinel is None:
        return value
    try:
        return base64.b64decode(sentinel.group(1), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise _mismatch(f"{NAME_HEADER} header has a malformed base64 value") from None


def discover_result(instructions: str) -> dict[str, Any]:
    return complete(
        {
            "supportedVersions": list(STATELESS_VERSIONS),
            "capabilities": {
                "tools": {"listChanged": False},
                "extensions": {TASKS_EXTENSION: {}},
            },
            "instructions": instructions,
            "ttlMs": LISTING_TTL_MS,
            "cacheScope": "private",  # per agent: never shared across tokens
            "_meta": {SERVER_INFO_META_KEY: SERVER_INFO},
        }
    )


def tools_list_result(tools: list[dict[str, Any]]) -> dict[str, Any]:
    return complete({"tools": tools, "ttlMs": LISTING_TTL_MS, "cacheScope": "private"})


def declares_tasks(capabilities: Any) -> bool:
    """The request's client takes a task for an answer (SEP-2663)."""
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def complete(result: dict[str, Any]) -> dict[str, Any]:
    """Every result of this era says what it is."""
    return {**result, "resultType": "complete"}
