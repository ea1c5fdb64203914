"""MCP services as tool backends (§11.1): a granted tool runs as ``tools/call`` on the service's
MCP endpoint over Streamable HTTP, through the official MCP client, with the descriptor's
credential. One client per endpoint and credential stays open and is shared by every call.

The SDK's client lives in anyio task groups that must be entered and left by the same task, so
each connection has an owner task of its own; calls from any request task use it meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from ..identity.oauth_client import ServiceTokens, TokenUnavailable
from ..identity.resource_metadata import TokenEndpoints
from ..manifest import Execution, ManagedTool, ToolAuth
from ..model.conversation import ToolOutcome, answered, error_envelope
from ..model.end_user import EndUser
from ..model.redaction import credential_secrets, redactor_for
from .http import credential_header, failed, token_unavailable
from .mcp_http import DEFAULT_ANSWER_BYTES, bounded, bounded_transport, result_bound

if TYPE_CHECKING:  # the SDK is imported when a build has MCP tools (it costs ~0.3 s to import)
    import mcp_types as types
    from mcp import Client
    from mcp.shared.exceptions import MCPError

log = logging.getLogger(__name__)
# Connecting (and each write) is bounded; a read may wait long: a server can hold a result
# stream open for minutes, as the SDK's own client allows.
CONNECT_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 300.0

# A service's tool list (the drift check, clawc discover): pages, tools and the time for all.
MAX_LIST_PAGES = 100
MAX_LISTED_TOOLS = 5000
# A whole listing's answers, all pages told (each page is also held to DEFAULT_ANSWER_BYTES):
# 100 pages of nearly 8 MiB each held 800 MB of tools (issue 46).
MAX_LISTING_BYTES = 16 * 1024 * 1024
LIST_TIMEOUT_S = 30.0

# The `_meta` key that carries a call's idempotency key where no HTTP header can (§8.2).
IDEMPOTENCY_META_KEY = "io.clawpod/idempotency-key"


@dataclass(frozen=True, slots=True)
class BackendKey:
    """What makes two tools share a connection: the endpoint and the credential sent to it
    (for OAuth, the auth and, for an exchange, the end user: a session per user)."""

    endpoint: str
    credential: tuple[str, str] | None
    oauth: ToolAuth | None = None
    end_user: tuple[str, str] | None = None  # (issuer, subject)
    tasks: bool = False
    """Opened with the tasks extension (SPEC §22): for the calls the sidecar lets the service
    run as tasks (:meth:`McpBackends.runs_as_task`), the others go without it."""


class OAuthBearer:
    """The httpx auth of an OAuth connection (SPEC §21): each request carries the current
    token; a 401 drops it and the request is sent once more with a fresh one, never more."""

    def __init__(self, tokens: ServiceTokens, auth: ToolAuth, token_url: str) -> None:
        self.tokens = tokens
        self.auth = auth
        self.token_url = token_url
        self.end_user: EndUser | None = None  # the latest call's, for an exchange
        self.refused = False  # the service answered 401 to a fresh token too
        # The tokens sent lately: what a result must not echo.
        self.sent: collections.deque[str] = collections.deque(maxlen=2)

    async def async_auth_flow(self, request: Any) -> Any:
        token = await self._token(None)
        request.headers["Authorization"] = self._sending(token)
        response = yield request
        if response.status_code == 401:
            token = await self._token(token)
            request.headers["Authorization"] = self._sending(token)
            response = yield request
            self.refused = response.status_code == 401

    def _sending(self, token: str) -> str:
        if token not in self.sent:
            self.sent.append(token)
        return f"Bearer {token}"

    @property
    def secrets(self) -> tuple[bytes, ...]:
        return tuple(token.encode() for token in self.sent)

    async def _token(self, stale: str | None) -> str:
        return await self.tokens.token(
            self.auth,
            self.end_user,
            timeout_s=CONNECT_TIMEOUT_S,
            token_url=self.token_url,
            stale=stale,
        )


@dataclass(slots=True)
class _Connection:
    """One open MCP client, owned by its own task until :meth:`close`."""

    key: BackendKey
    ready: asyncio.Future[Client] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    owner: asyncio.Task[None] | None = None
    bearer: OAuthBearer | None = None

    async def hold(self) -> None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        from .mcp_tasks import backend_tasks

        headers = dict([self.key.credential]) if self.key.credential else {}
        auth = None
        if self.bearer is not None:
            bearer = self.bearer

            class _Auth(httpx2.Auth):
                def async_auth_flow(self, request: Any) -> Any:
                    return bearer.async_auth_flow(request)

            auth = _Auth()
        # Pod services are reached directly: a proxy named in the sidecar's environment (for
        # providers) must never see a tool call or its credential.
        http = httpx2.AsyncClient(
            headers=headers,
            auth=auth,
            timeout=httpx2.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
            trust_env=False,
            transport=bounded_transport(),
        )
        try:
            async with (
                http,
                Client(
                    streamable_http_client(self.key.endpoint, http_client=http),
                    # Calls a service runs as tasks are polled here (SPEC §22).
                    extensions=[backend_tasks()] if self.key.tasks else [],
                ) as client,
            ):
                self.ready.set_result(client)
                await self.closing.wait()
        except BaseException as exc:  # handed to whoever awaits the connection
            if not self.ready.done():
                self.ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError())
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("MCP connection to %s ended: %s", self.key.endpoint, exc)

    async def close(self) -> None:
        self.closing.set()
        if self.owner is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self.owner, timeout=5)


class ServiceUnreachable(Exception):
    """No MCP session could be opened with the service."""


class McpBackends:
    def __init__(self, env: Mapping[str, str], tokens: ServiceTokens | None = None) -> None:
        self._env = env
        self._connections: dict[BackendKey, _Connection] = {}
        self.tokens = tokens if tokens is not None else ServiceTokens(env)
        self._token_endpoints = TokenEndpoints()
        # Per endpoint, the tools its listing says support tasks (`execution.taskSupport`).
        self._task_support: dict[str, frozenset[str]] = {}

    def runs_as_task(self, tool: ManagedTool) -> bool:
        """Whether a call of ``tool`` declares the tasks extension, letting the service answer
        with a task: a tool the pod marks long-running, or one the service's listing says
        supports tasks. Other calls are plain calls, bound by the tool timeout as always."""
        execution = tool.execution
        advertised = self._task_support.get(execution.endpoint, frozenset())
        return bool(tool.long_running) or (execution.tool or "") in advertised

    def key_for(
        self, execution: Execution, tool: ManagedTool, end_user: EndUser | None = None
    ) -> BackendKey:
        """Raises ``RequestProblem`` (credential_missing) like an HTTP tool would."""
        auth = execution.auth
        if auth.oauth:
            exchange = auth.type == "token-exchange" and end_user is not None
            user = (end_user.issuer, end_user.subject) if exchange and end_user else None
            return BackendKey(execution.endpoint, None, auth, user)
        return BackendKey(execution.endpoint, credential_header(tool, self._env))

    async def _bearer(
        self, key: BackendKey, end_user: EndUser | None, timeout_s: float
    ) -> OAuthBearer:
        """The connection's OAuth auth, its token fetched (or taken from the cache) before
        the SDK sends anything, so a token endpoint that fails fails the call closed here."""
        assert key.oauth is not None and self.tokens.client is not None
        token_url = await self._token_endpoints.for_service(
            self.tokens.client, key.oauth, key.endpoint
        )
        await self.tokens.token(key.oauth, end_user, timeout_s=timeout_s, token_url=token_url)
        connection = self._connections.get(key)
        bearer = connection.bearer if connection is not None else None
        if bearer is None:
            bearer = OAuthBearer(self.tokens, key.oauth, token_url)
        bearer.end_user = end_user
        return bearer

    def _secrets(self, auth: ToolAuth) -> tuple[bytes, ...]:
        """What a result must not echo: the credential as configured and as sent."""
        return credential_secrets(self._env.get(auth.env or "", ""), auth.type)

    async def client(self, key: BackendKey, bearer: OAuthBearer | None = None) -> Client:
        connection = self._connections.get(key)
        if connection is None or (connection.owner is not None and connection.owner.done()):
            connection = _Connection(key, bearer=bearer)
            connection.owner = asyncio.ensure_future(connection.hold())
            self._connections[key] = connection
        try:
            return await asyncio.wait_for(asyncio.shield(connection.ready), CONNECT_TIMEOUT_S)
        except Exception as exc:
            await self.forget(key)
            raise ServiceUnreachable(str(exc) or type(exc).__name__) from exc

    async def forget(self, key: BackendKey) -> None:
        """Drop a connection that failed, so the next call opens a fresh one."""
        connection = self._connections.pop(key, None)
        if connection is not None:
            await connection.close()

    async def list_tools(self, key: BackendKey) -> list[types.Tool]:
        """The service's tools (the drift check), with the pod's own OAuth token where its
        auth is client credentials (TokenUnavailable when none can be had)."""
        bearer = None
        if key.oauth is not None:
            bearer = await self._bearer(key, None, LIST_TIMEOUT_S)
        tools = await all_tools(await self.client(key, bearer))
        self._task_support[key.endpoint] = frozenset(
            tool.name for tool in tools if _task_support(tool) in ("optional", "required")
        )
        return tools

    async def call(
        self,
        tool: ManagedTool,
        arguments: dict[str, Any],
        *,
        timeout_s: float,
        max_result_bytes: int,
        started: float,
        idempotency_key: str | None = None,
        end_user: EndUser | None = None,
        task_started: Callable[[str], Awaitable[None]] | None = None,
        resumed_task: str | None = None,
        abandoned: asyncio.Event | None = None,
    ) -> ToolOutcome:
        """``task_started``: told the id of the task the service runs the call as (SPEC §22),
        before it is polled. ``resumed_task``: the call is already that task at the service
        (journaled before a restart): it is polled, never sent again (§8.2). ``abandoned``:
        set when the caller gives up on the call; the service's task is then cancelled."""
        from mcp.shared.exceptions import MCPError

        from .mcp_tasks import (
            TASK_ABANDONED,
            TASK_STARTED,
            BackendTaskAbandoned,
            BackendTaskFailed,
            poll_task,
        )

        execution = tool.execution
        key = self.key_for(execution, tool, end_user)
        if resumed_task is not None or self.runs_as_task(tool):
            key = dataclasses.replace(key, tasks=True)
        bearer = None
        if key.oauth is not None:
            try:
                bearer = await self._bearer(key, end_user, timeout_s)
            except TokenUnavailable as exc:
                return token_unavailable(tool, exc, started)
        try:
            client = await self.client(key, bearer)
        except ServiceUnreachable as exc:
            if bearer is not None and bearer.refused:
                message = "the service refused its OAuth token (401), a fresh one too"
                return failed("http_401", message, False, started)
            return failed("unreachable", f"could not open an MCP session ({exc})", False, started)
        meta = {IDEMPOTENCY_META_KEY: idempotency_key} if idempotency_key else None
        try:
            with bounded(result_bound(max_result_bytes)) as bound:
                async with asyncio.timeout(timeout_s):
                    if resumed_task is not None:
                        result = await poll_task(client.session, resumed_task, abandoned)
                    else:
                        told = TASK_STARTED.set(task_started)
                        watched = TASK_ABANDONED.set(abandoned)
                        try:
                            result = await client.call_tool(
                                execution.tool or "", arguments, meta=meta
                            )
                        finally:
                            TASK_STARTED.reset(told)
                            TASK_ABANDONED.reset(watched)
        except TimeoutError:
            message = f"the service did not answer within {timeout_s:g} s"
            return failed("timeout", message, True, started)
        except MCPError as exc:
            if bound.exceeded:  # the SDK reports the cut read as a failed request
                message = f"the service's result is larger than {bound.limit} bytes: not read"
                return failed("result_too_large", message, True, started)
            return _protocol_error(exc, started)
        except BackendTaskAbandoned as exc:
            return failed("cancelled", str(exc), True, started)
        except BackendTaskFailed as exc:
            return failed("mcp_error", str(exc), True, started)
        except Exception as exc:  # transport failures surface as the client library's own types
            await self.forget(key)
            message = f"the MCP exchange with the service failed ({type(exc).__name__})"
            return failed("unreachable", message, True, started)
        secrets = self._secrets(execution.auth) if key.credential else ()
        if bearer is not None:
            secrets = bearer.secrets
        return outcome_for_result(result, max_result_bytes, secrets, started)

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.close()


class ListingRefused(Exception):
    """A service's tool list broke a bound: too many pages or tools, or a cursor repeated."""


async def all_tools(client: Client) -> list[types.Tool]:
    """Every page of a service's tool list, never from the client's response cache: a drift
    check and ``clawc discover`` must see what is served now.

    Bounded (issue 30: an endless pagination cost 1.34 GB and 36 s of CPU): at most
    ``MAX_LIST_PAGES`` pages and ``MAX_LISTED_TOOLS`` tools, a cursor never twice, each page
    held to the default answer size (``mcp_http.py``) and all of them to
    ``MAX_LISTING_BYTES``; callers bound the time (``LIST_TIMEOUT_S``)."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    remaining = MAX_LISTING_BYTES
    for _ in range(MAX_LIST_PAGES):
        with bounded(min(DEFAULT_ANSWER_BYTES, remaining)) as bound:
            try:
                page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            except Exception:
                if not bound.exceeded:
                    raise
                whole = bound.limit == remaining
                raise ListingRefused(
                    f"the service's tool list is larger than {MAX_LISTING_BYTES} bytes"
                    if whole
                    else f"a page of the service's tool list is larger than {bound.limit} bytes"
                ) from None
        remaining -= bound.read
        tools += page.tools
        if len(tools) > MAX_LISTED_TOOLS:
            raise ListingRefused(f"the service lists more than {MAX_LISTED_TOOLS} tools")
        cursor = page.next_cursor
        if not cursor:
            return tools
        if cursor in seen:
            raise ListingRefused("the service repeated a page cursor (an endless listing)")
        seen.add(cursor)
    raise ListingRefused(f"the service's tool list runs past {MAX_LIST_PAGES} pages")


def _task_support(tool: types.Tool) -> str | None:
    """A listed tool's ``execution.taskSupport`` (2025-11-25), where its listing kept one."""
    execution = getattr(tool, "execution", None)
    return getattr(execution, "task_support", None)


def _protocol_error(exc: MCPError, started: float) -> ToolOutcome:
    """A JSON-RPC error from the service (unknown tool, bad params): executed, not a result."""
    outcome = failed(
        "mcp_error", f"the service refused the call: {exc.error.message}", True, started
    )
    outcome.envelope["error"]["mcp_code"] = exc.error.code
    return outcome


def _result_data(result: types.CallToolResult) -> Any:
    """structuredContent when the service gave it, else the content: one text block as JSON
    when it parses (as text otherwise), several blocks as they came."""
    from mcp_types import TextContent

    if result.structured_content is not None:
        return result.structured_content
    blocks = result.content
    if len(blocks) == 1 and isinstance(blocks[0], TextContent):
        text = blocks[0].text
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in blocks]


def _error_message(result: types.CallToolResult) -> str:
    texts = [b.text for b in result.content if getattr(b, "type", None) == "text"]
    return " ".join(texts)[:500] or "the tool reported an error"


def outcome_for_result(
    result: types.CallToolResult,
    max_result_bytes: int,
    secrets: tuple[bytes, ...],
    started: float,
) -> ToolOutcome:
    """The §4.2.8 envelope for a ``CallToolResult`` (``isError`` -> ``ok: false``), with the
    same redaction and size limit as an HTTP body."""
    redact = redactor_for(secrets)
    encoded = redact(orjson.dumps(_result_data(result)))
    original = len(encoded)
    truncated = original > max_result_bytes
    data: Any = (
        encoded[:max_result_bytes].decode("utf-8", "ignore") if truncated else orjson.loads(encoded)
    )
    code: str | None = None
    if result.is_error:
        code = "tool_error"
        message = redact.text(_error_message(result))
        envelope = error_envelope(code, message)
        envelope["data"] = data
    else:
        envelope = {"ok": True, "status": None, "data": data}
    latency_ms = (time.perf_counter() - started) * 1000
    return answered(envelope, code, None, latency_ms, original, truncated)
