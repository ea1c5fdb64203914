"""The state one running sidecar holds (``SidecarState``), built once by ``create_app``; each
request's own state is its ``RequestContext`` (``exchange.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from ...manifest import SidecarConfig
from ...request_body import BodyBytesInFlight
from ...tasks import ShieldedTasks
from ..providers.upstream import UpstreamClient

if TYPE_CHECKING:
    from ...audit.log import AuditLog
    from ...backends.drift import DriftChecker
    from ...execution.executor import ToolExecutor
    from ...governance.budgets import TokenBudgets
    from ...governance.gate import GovernedExecutor
    from ...mcp.endpoint import McpEndpoint
    from ...model.usage import PriceBook
    from ...observability.metrics import Metrics
    from ...state.continuity import ContinuityStore
    from ...state.journal import RequestJournal
    from ...state.lock import StateLock
    from ...state.stored_objects import StoredObjects
    from ..front.edge import TokenVerifier
    from ..providers.stream_tools import StreamToolsSupport
    from ..providers.upstream import ModelRouter


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
