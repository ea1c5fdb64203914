"""One client request to an LLM route: its state (``RequestContext``) and its response, whoever
serves the connection.

The LLM routes are written against ``Exchange``; aiohttp's server serves them through
``AiohttpExchange``. A response is sent whole (``respond``) or as a stream
(``start_stream``, ``write``..., ``end``); once its head is out (``started``) an error can only
end the body in-band.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ...codecs.base import Codec
from ...manifest import AgentBuild
from ...model.end_user import AuthKind, EndUser, owner_of
from ...model.errors import ApiError
from ...model.token_estimate import request_tokens
from ...request_body import no_accounting, read_body_once
from ...state.counters import Hold
from ...state.stored_objects import StoredRef
from ..front.edge import close_if_refused, mark_authenticated
from ..providers.upstream import Target, UpstreamTarget

if TYPE_CHECKING:
    from .context import SidecarState
    from .translation_plan import Translations

ResponseHeaders = Mapping[str, str]
_NO_PARAMS: Mapping[str, str] = MappingProxyType({})


class Exchange(ABC):
    """The request's head and body, and the response's writer."""

    __slots__ = ()

    method: str
    path: str
    query: str  # the raw query string, without "?"
    path_params: Mapping[str, str]  # the route's {parameters}, decoded
    headers: Mapping[str, str]  # case-insensitive lookup

    @property
    @abstractmethod
    def started(self) -> bool:
        """True once the response head has been sent."""

    @abstractmethod
    async def read_body(
        self, limit: int, take: Callable[[int], None] = no_accounting
    ) -> bytes | bytearray:
        """The whole request body; ``ApiError`` 413 when it is over ``limit`` bytes. ``take``
        is told each size of memory the body is given before it is (it may refuse)."""

    @abstractmethod
    def authenticated(self) -> None:
        """The request's token matched an agent (the edge keeps its connection at the cap)."""

    @abstractmethod
    def client_gone(self) -> bool:
        """True when the client's connection is closed or closing."""

    @abstractmethod
    async def respond(self, status: int, body: bytes, headers: ResponseHeaders) -> None:
        """Send a whole response; raises ``ConnectionError`` when the client is gone."""

    @abstractmethod
    async def start_stream(self, status: int, headers: ResponseHeaders) -> None:
        """Send the head of a response whose body follows in ``write`` calls."""

    @abstractmethod
    async def write(self, data: bytes) -> None:
        """Send body bytes now (backpressure: waits while the client reads slowly)."""

    @abstractmethod
    async def end(self) -> None:
        """End a streamed body."""


def too_large(limit: int) -> ApiError:
    return ApiError(413, "request_too_large", f"request body exceeds {limit} bytes")


class AiohttpExchange(Exchange):
    """An exchange on a connection aiohttp serves; the route returns ``response``. A direct
    route's request (``edge.DIRECT_ROUTES``) was never routed: it has no parameters."""

    __slots__ = ("_request", "headers", "method", "path", "path_params", "query", "response")

    def __init__(self, request: web.Request, *, routed: bool = True) -> None:
        self._request = request
        self.method = request.method
        self.path = request.path
        self.query = request.query_string
        self.path_params = request.match_info if routed else _NO_PARAMS
        self.headers = request.headers
        self.response: web.StreamResponse | None = None

    @property
    def started(self) -> bool:
        return self.response is not None and self.response.prepared

    async def read_body(
        self, limit: int, take: Callable[[int], None] = no_accounting
    ) -> bytes | bytearray:
        body = await read_body_once(self._request, limit, take)
        if body is None:
            raise too_large(limit)
        return body

    def authenticated(self) -> None:
        mark_authenticated(self._request)

    def client_gone(self) -> bool:
        transport = self._request.transport
        return transport is None or transport.is_closing()

    async def respond(self, status: int, body: bytes, headers: ResponseHeaders) -> None:
        response = self._started(web.Response(status=status, body=body, headers=headers))
        await response.prepare(self._request)
        await response.write_eof()

    async def start_stream(self, status: int, headers: ResponseHeaders) -> None:
        await self._started(web.StreamResponse(status=status, headers=headers)).prepare(
            self._request
        )

    def _started(self, response: web.StreamResponse) -> web.StreamResponse:
        # A direct route's response meets no on_response_prepare signal: the edge's receiver
        # is called here (for a routed one it runs twice, to the same effect).
        close_if_refused(self._request, response)
        self.response = response
        return response

    async def write(self, data: bytes) -> None:
        assert self.response is not None
        await self.response.write(data)

    async def end(self) -> None:
        assert self.response is not None
        await self.response.write_eof()


@dataclass(frozen=True, slots=True)
class Caller:
    """What is known of a request once it is authenticated: who asks, for whom, how it proved
    it, on which route. Never changes."""

    agent: AgentBuild
    codec: Codec
    route: str
    request_id: str
    started: float  # time.monotonic() when the request arrived
    forward_headers: dict[str, str]  # safe client headers for upstream; never auth
    budgeted: bool = False
    """The agent or its end user has a daily budget: the request is admitted, held and charged
    (#32, SPEC §21)."""
    end_user: EndUser | None = None
    """The verified end user the request is for (SPEC §21): audited, budgeted, passed to tools."""
    auth: AuthKind | None = None
    """How the agent proved who it is, in a pod with ``identity`` (audited, SPEC §21)."""

    @property
    def owner(self) -> str:
        """Whose remembered state the request may use: its agent's, for its end user."""
        return owner_of(self.agent.agent.id, self.end_user)


@dataclass(frozen=True, slots=True)
class Routing:
    """What routing returned for the request's body: set once (``RequestContext.routed``); a
    request refused before that has ``UNROUTED``."""

    stream: bool = False
    request: dict[str, Any] = field(default_factory=dict)
    """The client's body as parsed (its model set to the target's)."""
    targets: Sequence[Target] = ()
    """(provider, its settings, upstream model) in failover order (SPEC §14)."""
    walks: bool = True
    """The targets need the failover walk (``RoutePlan.walks``); False: one plain target."""
    method: str = "POST"
    upstream_path: str | None = None  # a resource route's concrete path (and query) upstream
    translations: Translations | None = None
    """Set when a target speaks another protocol than the caller (contract §18)."""


UNROUTED = Routing()


@dataclass(slots=True)
class Ledger:
    """The one mutable part of a request: what it accumulates while it runs, for its answer,
    its charge and its audit record."""

    provider_name: str | None = None
    """The provider called (first the route's first target, then the one that answered); None
    for a request refused before any call."""
    model: str | None = None  # upstream model, "provider/" prefix stripped
    attempts: list[dict[str, str | None]] = field(default_factory=list)
    """Each upstream attempt: provider, key label, outcome; the audit record's ``providers``."""
    reserved: Hold | None = None
    """Tokens and USD held against the agent's budgets while the request runs (#32)."""
    strip_usage: bool = False
    """Chat Completions usage was asked upstream for the budget; the client did not ask."""
    audit_extra: dict[str, Any] | None = None  # fields the request's audit record adds
    objects: list[dict[str, str]] = field(default_factory=list)
    """Stored objects this request used, made or was refused (for its audit record)."""
    input_estimate: int | None = None
    """The client's request in tokens, once estimated (``RequestContext.input_estimate``)."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One authenticated client request to an LLM route: the sidecar it runs in, who asks
    (``caller``), where routing sends it (``routing``) and, the only part that changes, what it
    accumulates (``ledger``)."""

    state: SidecarState
    caller: Caller
    ledger: Ledger = field(default_factory=Ledger)
    routing: Routing = UNROUTED

    def routed(self, routing: Routing) -> RequestContext:
        """The request once routed: the same caller and ledger."""
        return RequestContext(self.state, self.caller, self.ledger, routing)

    def input_estimate(self) -> int:
        """The client's request in tokens, estimated once asked: where budget holds start
        (#32), and its input where the provider counts none (#45)."""
        ledger = self.ledger
        if ledger.input_estimate is None:
            ledger.input_estimate = request_tokens(self.routing.request, self.caller.codec.name)
        return ledger.input_estimate

    def note_objects(self, use: str, refs: list[StoredRef]) -> None:
        self.ledger.objects += [{"kind": ref.kind, "id": ref.id, "use": use} for ref in refs]

    def target(self, provider: str, key: str | None = None) -> UpstreamTarget:
        """Where this request goes at ``provider`` (with its pooled ``key``, if any)."""
        routing = self.routing
        return UpstreamTarget(
            provider,
            self.caller.route,
            self.caller.forward_headers,
            routing.stream,
            routing.method,
            routing.upstream_path,
            key,
        )

    def record_objects(self, refs: list[StoredRef]) -> None:
        """Bind objects the provider stored for this request to its owner (agent, end user)."""
        if refs:
            self.note_objects("created", self.state.objects.record(self.caller.owner, refs))
