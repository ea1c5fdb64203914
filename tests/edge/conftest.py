"""Fixtures for the edge tests: sidecars with the default or short deadlines (so a test waits
fractions of a second, not the production 10/30/75 s), and a plain aiohttp server to compare."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from clawpod.sidecar.server.front.edge import EdgeLimits
from tests.sidecar.conftest import Pod
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.sidecar import start_sidecar
from tests.support.upstream import Reply, StubUpstream, openai_completion

SHORT = EdgeLimits(
    head_timeout_s=0.5, body_idle_timeout_s=0.5, keepalive_timeout_s=0.5, lingering_s=0.5
)
EdgePodFactory = Callable[..., Awaitable[Pod]]


@pytest.fixture
async def make_edge_pod(tmp_path: Path, upstream: StubUpstream) -> AsyncIterator[EdgePodFactory]:
    """A sidecar with one native agent whose provider always answers "edge"."""
    started: list[Pod] = []
    upstream.always("openai", Reply.json(openai_completion("edge")))

    async def make(limits: EdgeLimits | None = None, **config: Any) -> Pod:
        root = tmp_path / f"build{len(started)}"
        state_dir = tmp_path / f"state{len(started)}"
        tokens = write_build(
            root,
            [AgentSpec("agent", mode="native")],
            providers_for(upstream.openai_url, upstream.anthropic_url),
            **config,
        )
        sidecar = await start_sidecar(root, state_dir, limits=limits)
        started.append(Pod(sidecar, upstream, tokens, state_dir))
        return started[-1]

    yield make
    for pod in started:
        await pod.close()


@pytest.fixture
async def pod(make_edge_pod: EdgePodFactory) -> Pod:
    return await make_edge_pod()


@pytest.fixture
async def short_pod(make_edge_pod: EdgePodFactory) -> Pod:
    """Deadlines of half a second."""
    return await make_edge_pod(SHORT)


@pytest.fixture
async def plain_aiohttp() -> AsyncIterator[tuple[str, int]]:
    """A plain aiohttp server with default settings: reads any request's body, answers 200."""

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield host, port
    await runner.cleanup()
