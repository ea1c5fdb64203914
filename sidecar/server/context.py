"""Per-app state and per-request context shared by the server and the mediation engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..codecs.base import Codec
from ..manifest import AgentBuild, Provider, SidecarConfig
from ..request_body import BodyBytesInFlight
from ..state.stored_objects import StoredRef
from ..tasks import ShieldedTasks
from .upstream import UpstreamClient, UpstreamTarget

if TYPE_CHECKING:
    from ..audit.log import AuditLog
    from ..backends.drift import DriftChecker
    from ..execution.executor import ToolExecutor
    from ..governance.budgets import TokenBudgets
    from ..governance.gate import GovernedExecutor
    from ..mcp.endpoint import McpEndpoint
    from ..model.usage import PriceBook
    from ..observability.metrics import Metrics
    from ..state.continuity import ContinuityStore
    from ..state.journal import RequestJournal
    from ..state.lock import StateLock
    from ..state.stored_objects import StoredObjects
    from .edge import TokenVerifier
    from .stream_tools import StreamToolsSupport
    from .translation_plan import Translations
    from .upstream import ModelRouter


@dataclass
class SidecarState:
    """Everything one running sidecar holds; built once by ``create_app``."""

    config: SidecarConfig
    state_dir: Path
    upstream: UpstreamClient
    executor: ToolExecutor
    audit: AuditLog
    metrics: Metrics
    continuity: ContinuityStore
    verifier: TokenVerifier
    router: ModelRouter
    mcp: McpEndpoint
    sse_keepalive_s: float  # between comment keep-alives to a waiting streaming client
    tasks: ShieldedTasks  # work that outlives its request; drained once at shutdown
    governed: GovernedExecutor  # the executor behind policy, rate limits and approvals
    budgets: TokenBudgets
    operator_token: str | None  # CLAW_OPERATOR_TOKEN: the operator API is closed without it
    drift: DriftChecker  # pins of MCP backends' tool definitions (§11.2)
    journal: RequestJournal  # mediated requests' progress, for resuming a retry (contract §8.2)
    objects: StoredObjects  # provider-stored objects (Responses ids) and the agent holding each
    prices: PriceBook  # USD per million tokens of each provider's models (SPEC §14)
    stream_tools: StreamToolsSupport  # which providers answer streamed tool requests (§7.4)
    state_lock: StateLock | None = None  # held by a started sidecar (SPEC §13.1); /readyz checks it
    body_bytes: BodyBytesInFlight = field(init=False)  # each agent's request bodies at once

    def __post_init__(self) -> None:
        self.body_bytes = BodyBytesInFlight(self.config.max_body_bytes)


STATE_KEY: web.AppKey[SidecarState] = web.AppKey("claw_state", SidecarState)


@dataclass(slots=True)
class RequestContext:
    """One authenticated client request to an LLM route."""

    state: SidecarState
    agent: AgentBuild
    codec: Codec
    route: str
    request_id: str
    started: float  # time.monotonic() when the request arrived
    forward_headers: dict[str, str]  # safe client headers for upstream; never auth
    # Known once the body is read and routed; a request refused before that keeps what it got.
    stream: bool = False
    provider_name: str | None = None
    model: str | None = None  # upstream model, "provider/" prefix stripped
    method: str = "POST"
    upstream_path: str | None = None  # a resource route's concrete path (and query) upstream
    # Stored objects this request used, made or was refused (for its audit record).
    objects: list[dict[str, str]] = field(default_factory=list)

    def note_objects(self, use: str, refs: list[StoredRef]) -> None:
        self.objects += [{"kind": ref.kind, "id": ref.id, "use": use} for ref in refs]

    def target(self, provider: str, key: str | None = None) -> UpstreamTarget:
        """Where this request goes at ``provider`` (with its pooled ``key``, if any)."""
        return UpstreamTarget(
            provider,
            self.route,
            self.forward_headers,
            self.stream,
            self.method,
            self.upstream_path,
            key,
        )

    def record_objects(self, refs: list[StoredRef]) -> None:
        """Bind objects the provider stored for this request to its agent."""
        if refs:
            self.note_objects("created", self.state.objects.record(self.agent.agent.id, refs))

    audit_extra: dict[str, Any] | None = None  # fields the request's audit record adds
    targets: list[tuple[str, Provider, str | None]] = field(default_factory=list)
    """(provider, its settings, upstream model) in failover order (SPEC §14)."""
    attempts: list[dict[str, str | None]] = field(default_factory=list)
    """Each upstream attempt: provider, key label, outcome; the audit record's ``providers``."""
    reserved: tuple[int, float] = (0, 0.0)
    """Tokens and USD held against the agent's budgets while the request runs (#32)."""
    strip_usage: bool = False
    """Chat Completions usage was asked upstream for the budget; the client did not ask."""
    request_bytes: int = 0
    """Size of the client's body, where budget estimates start (#32)."""
    translations: Translations | None = None
    """Set when a target speaks another protocol than the caller (contract §18)."""
    walks: bool = True
    """The targets need the failover walk (``RoutePlan.walks``); False: one plain target."""
    budgeted: bool = False
    """The agent has a daily budget: the request is admitted, held and charged (#32)."""
