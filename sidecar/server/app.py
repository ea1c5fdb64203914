"""The sidecar application: its state built once from the build, its routes, and its
lifecycle (what starts with it and what shutdown drains and flushes)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from aiohttp import web

from clawpod.sidecar.audit.chain import audit_key
from clawpod.sidecar.audit.log import AuditLog
from clawpod.sidecar.execution.executor import ToolExecutor
from clawpod.sidecar.manifest import Build
from clawpod.sidecar.mcp.endpoint import McpEndpoint
from clawpod.sidecar.mediation.continuity import ContinuityStore
from clawpod.sidecar.observability.metrics import Metrics
from clawpod.sidecar.server.auth import TokenVerifier
from clawpod.sidecar.server.context import STATE_KEY, SidecarState
from clawpod.sidecar.server.llm_routes import add_llm_routes
from clawpod.sidecar.server.protocol_errors import protocol_errors
from clawpod.sidecar.server.routes import healthz, mcp, models
from clawpod.sidecar.server.routing import ModelRouter
from clawpod.sidecar.server.upstream import UpstreamClient
from clawpod.sidecar.tasks import ShieldedTasks
from clawpod.sidecar.transport.keepalive import keepalive_interval


def create_app(
    build: Build, *, state_dir: Path, env: Mapping[str, str] | None = None
) -> web.Application:
    """The sidecar for ``build``; provider keys and tool credentials are read from ``env``."""
    env = os.environ if env is None else env
    state_dir = Path(state_dir)
    config = build.config
    metrics = Metrics()
    tasks = ShieldedTasks()
    executor = ToolExecutor(env=env, metrics=metrics, tasks=tasks)
    # Raises AuditKeyError / AuditStateError: a sidecar that cannot audit must not start.
    audit = AuditLog(state_dir, key=audit_key(env), agents=build.agents)
    keepalive_s = keepalive_interval(env)
    state = SidecarState(
        config=config,
        state_dir=state_dir,
        upstream=UpstreamClient(config, env, metrics),
        executor=executor,
        audit=audit,
        metrics=metrics,
        continuity=ContinuityStore(state_dir, agents=len(build.agents)),  # per-agent quotas
        verifier=TokenVerifier(build),
        router=ModelRouter(config),
        mcp=McpEndpoint(
            executor, audit, metrics, keepalive_s, tasks, allowed_hosts=config.allowed_hosts
        ),
        sse_keepalive_s=keepalive_s,
        tasks=tasks,
    )
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[protocol_errors])
    app[STATE_KEY] = state
    app.cleanup_ctx.append(_lifecycle)
    add_llm_routes(app.router)
    app.router.add_get("/v1/models", models)
    app.router.add_route("*", "/mcp", mcp)
    app.router.add_get("/healthz", healthz)  # /readyz and /metrics: server/admin.py
    return app


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE_KEY]
    state.state_dir.mkdir(parents=True, exist_ok=True)
    await state.executor.start()
    try:
        yield
    finally:
        await state.upstream.close()  # model calls still waiting fail fast
        await state.tasks.drain()  # tool calls already sent finish and are audited
        await state.executor.close()
        await state.continuity.close()
        await state.audit.close()  # flushes pending audit records to disk


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE_KEY]
    state.state_dir.mkdir(parents=True, exist_ok=True)
    await state.executor.start()
    try:
        yield
    finally:
        await state.upstream.close()  # model calls still waiting fail fast
        await state.tasks.drain()  # tool calls already sent finish and are audited
        await state.executor.close()
        await state.continuity.close()
        await state.audit.close()  # flushes pending audit records to disk
