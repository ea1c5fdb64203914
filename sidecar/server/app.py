"""The sidecar application: its state built once from the build, its routes, and its
lifecycle (what starts with it and what shutdown drains and flushes)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from aiohttp import web

from ..audit.log import AuditLog, audit_key
from ..backends.drift import DriftChecker
from ..execution.executor import ToolExecutor
from ..governance.budgets import TokenBudgets, local_counters
from ..governance.gate import GovernedExecutor
from ..governance.taint_guard import held_credentials
from ..governance.webhooks import ApprovalWebhook, webhook_signer
from ..manifest import Build
from ..mcp.endpoint import McpEndpoint
from ..mcp.tasks import DEFAULT_MAX_AGE_S, NativeTasks
from ..model.env_names import AUDIT_KEY_ENV, OPERATOR_TOKEN_ENV, WEBHOOK_SECRET_ENV
from ..model.usage import PriceBook
from ..observability.metrics import Metrics
from ..state.approvals import ApprovalStore
from ..state.continuity import ContinuityStore
from ..state.counters import Counters
from ..state.journal import RequestJournal
from ..state.lock import StateLock, instance_name
from ..state.shared_counters import SharedCounters, SharedLimitsError, connect
from ..state.stored_objects import StoredObjects
from ..state.task_journal import TaskJournal
from ..tasks import ShieldedTasks
from ..transport.keepalive import keepalive_interval
from .front.edge import TokenVerifier, protocol_errors
from .llm.llm_routes import add_llm_routes
from .operator.operator_auth import operator_token
from .providers.stream_tools import StreamToolsSupport
from .providers.upstream import ModelRouter, UpstreamClient
from .request.context import STATE_KEY, SidecarState
from .routes import healthz, mcp, model, models


def create_app(
    build: Build,
    *,
    state_dir: Path,
    env: Mapping[str, str] | None = None,
    state_lock: StateLock | None = None,
) -> web.Application:
    """The sidecar for ``build``; provider keys and tool credentials are read from ``env``;
    ``state_lock`` is the lock a started sidecar holds on ``state_dir`` (§13.1)."""
    env = os.environ if env is None else env
    state_dir = Path(state_dir)
    config = build.config
    metrics = Metrics()
    tasks = ShieldedTasks()
    executor = ToolExecutor(env=env, metrics=metrics, tasks=tasks)
    # Raises AuditKeyError / AuditStateError: a sidecar that cannot audit must not start.
    audit = AuditLog(
        state_dir, key=audit_key(env), agents=build.agents, instance=instance_name(env)
    )
    keepalive_s = keepalive_interval(env)
    webhook_url = config.governance.approvals.webhook if config.governance else None
    # Raises WebhookSecretError: an approval webhook is never sent unsigned.
    signer = webhook_signer(webhook_url, env)
    webhook = ApprovalWebhook(webhook_url, signer) if webhook_url and signer else None
    # Raises SharedLimitsError: a pod that shares its limits never counts alone unasked.
    counters = _shared_counters(build, state_dir, env, metrics)
    governed = GovernedExecutor(
        executor,
        config.governance,
        build.agents,
        ApprovalStore(state_dir),
        manifest_digest=build.digest_sha256,
        audit=audit,
        metrics=metrics,
        tasks=tasks,
        webhook=webhook,
        taint=config.taint,
        credentials=(
            *held_credentials(build, env),
            *(
                env.get(name, "")
                for name in (OPERATOR_TOKEN_ENV, WEBHOOK_SECRET_ENV, AUDIT_KEY_ENV)
            ),
        ),
        rates=counters,
    )
    native_tasks = NativeTasks(
        TaskJournal(state_dir, max_age_s=DEFAULT_MAX_AGE_S), tasks
    )  # tasks on /mcp, kept across restarts (SPEC §22)
    metrics.tasks_running.set_function(lambda: len(native_tasks.running()))
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
        prices=PriceBook(config.providers),
        mcp=McpEndpoint(
            governed,
            audit,
            metrics,
            keepalive_s,
            tasks,
            native_tasks,
            build.agents,
            allowed_hosts=config.allowed_hosts,
            pod=config.pod,
            max_body_bytes=config.max_body_bytes,
        ),
        sse_keepalive_s=keepalive_s,
        tasks=tasks,
        governed=governed,
        budgets=TokenBudgets(config.governance, build.agents, state_dir, counters=counters),
        # Raises OperatorTokenError: a weak token would open the operator listener to guessing.
        operator_token=operator_token(env),
        drift=DriftChecker(
            build.agents, executor.mcp, executor.quarantine, audit, metrics, state_dir
        ),
        journal=RequestJournal(
            state_dir, window_ms=config.retry_window_ms, agents=len(build.agents)
        ),  # per-agent quotas
        state_lock=state_lock,
        objects=StoredObjects(state_dir),
        stream_tools=StreamToolsSupport(config.providers),
    )
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[protocol_errors])
    app[STATE_KEY] = state
    app.cleanup_ctx.append(_lifecycle)
    app.on_shutdown.append(_end_waiting_approvals)
    add_llm_routes(app)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model_id:.+}", model)  # ids may hold a provider/ prefix
    app.router.add_route("*", "/mcp", mcp)
    app.router.add_get("/healthz", healthz)  # /readyz, /metrics, /operator/*: server/admin.py
    return app


def _shared_counters(
    build: Build, state_dir: Path, env: Mapping[str, str], metrics: Metrics
) -> Counters | None:
    """The pod's shared store of rates and budgets (SPEC §24); None: this sidecar's own."""
    shared = build.config.shared_limits
    if shared is None:
        return None
    url = env.get(shared.url_env)
    if not url:
        raise SharedLimitsError(f"x-claw.shared-limits names {shared.url_env}, which is not set")
    return SharedCounters(
        connect(url),
        pod=build.config.pod,
        on_unreachable=shared.on_unreachable,
        local=local_counters(build.config.governance, build.agents, state_dir),
        metrics=metrics,
    )


async def _end_waiting_approvals(app: web.Application) -> None:
    """First thing on shutdown, before requests in progress are waited for: calls waiting for
    an operator are answered now (``approval_pending``, in the caller's protocol), so they
    neither hold the shutdown until its timeout nor end as cut streams (issue 30). So are
    calls waiting for an MCP client's answer (SPEC §16)."""
    app[STATE_KEY].mcp.dispatch.native_tasks.stop()  # their approval waits resume on restart
    app[STATE_KEY].governed.waits.stop()
    app[STATE_KEY].mcp.dispatch.elicitations.stop()
    app[STATE_KEY].mcp.sessions.close_streams()  # their GET streams end now


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE_KEY]
    state.state_dir.mkdir(parents=True, exist_ok=True)
    await state.executor.start()
    if isinstance(state.budgets.counters, SharedCounters):
        await state.budgets.counters.start()
    # Pins are checked before the first request is served, then every ttl in the background.
    await state.drift.check_due()
    dispatch = state.mcp.dispatch
    dispatch.resume(await dispatch.native_tasks.recover())
    drift = state.tasks.spawn(state.drift.run())
    try:
        yield
    finally:
        drift.cancel()  # the one task that never ends by itself
        await state.upstream.close()  # model calls still waiting fail fast
        dispatch.native_tasks.stop()
        state.governed.waits.stop()  # calls waiting for an operator give up; files stay
        if state.governed.webhook is not None:
            state.governed.webhook.stop()  # no more retries: the drain below must not wait
        await state.tasks.drain()  # tool calls already sent finish and are audited
        await state.executor.close()
        await state.continuity.close()
        state.journal.close()
        dispatch.native_tasks.close()
        state.objects.close()
        await state.verifier.close()
        await state.audit.close()  # flushes pending audit records to disk
        if isinstance(state.budgets.counters, SharedCounters):
            await state.budgets.counters.close()
