"""Serving the sidecar on a TCP socket: the front door listens, aiohttp stands behind it."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

from aiohttp import web
from clawpod.sidecar.server.app import LLM_ROUTES, serve_llm
from clawpod.sidecar.server.context import STATE_KEY
from clawpod.sidecar.server.front import FrontDoor

BACKLOG = 1024  # connections waiting to be accepted; a pod's agents open a few each


@dataclass
class Listening:
    """A running sidecar: its address, and how to stop it in order."""

    app: web.Application
    runner: web.AppRunner
    server: asyncio.Server
    front: FrontDoor

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def open_connections(self) -> int:
        """Client connections open now, on the front door or handed to aiohttp."""
        return len(self.front.connections) + len(self.runner.server.connections)  # type: ignore[union-attr]

    async def close(self, timeout_s: float) -> None:
        """Stop accepting, let requests in progress finish, then run the app's cleanup (which
        flushes the audit log)."""
        self.server.close()
        await self.front.shutdown(timeout_s)
        await self.runner.cleanup()


async def listen(
    app: web.Application, host: str, port: int, *, shutdown_timeout_s: float
) -> Listening:
    """Set ``app`` up (its start-up hooks run) and serve it on ``host:port`` (0: any port)."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout_s)
    await runner.setup()
    state = app[STATE_KEY]
    front = FrontDoor(
        functools.partial(serve_llm, state=state),
        LLM_ROUTES,
        runner.server,  # type: ignore[arg-type]  # set up above
        max_body_bytes=state.config.max_body_bytes,
    )
    try:
        server = await asyncio.get_running_loop().create_server(
            front, host, port, backlog=BACKLOG, reuse_address=True
        )
    except OSError:
        await runner.cleanup()
        raise
    return Listening(app, runner, server, front)
