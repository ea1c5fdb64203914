"""Serving an app on a TCP socket with aiohttp's own HTTP/1.1 server and the edge's bounds."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from .edge import (
    EdgeLimits,
    EdgeRunner,
    EdgeServer,
    close_when_refused,
    refuse_at_the_edge,
)

BACKLOG = 1024  # connections waiting to be accepted; a pod's agents open a few each


@dataclass
class Listening:
    """A running listener: its address, and how to stop it in order."""

    app: web.Application
    runner: web.AppRunner
    site: web.TCPSite

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.runner.addresses[0][:2]
        return host, port

    @property
    def open_connections(self) -> int:
        """Client connections open now."""
        server = self.runner.server
        return server.open_connections if isinstance(server, EdgeServer) else 0

    async def close(self) -> None:
        """Stop accepting, let requests in progress finish (up to the site's shutdown timeout),
        then run the app's cleanup (which flushes the audit log)."""
        await self.runner.cleanup()


async def listen(
    app: web.Application,
    host: str,
    port: int,
    *,
    shutdown_timeout_s: float,
    limits: EdgeLimits | None = None,
) -> Listening:
    """Set ``app`` up (its start-up hooks run) and serve it on ``host:port`` (0: any port)."""
    # Innermost, so the app's error middleware shapes the refusal in the caller's protocol.
    app.middlewares.append(refuse_at_the_edge)
    app.on_response_prepare.append(close_when_refused)
    runner = EdgeRunner(app, limits=limits or EdgeLimits(), shutdown_timeout=shutdown_timeout_s)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=BACKLOG, reuse_address=True)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return Listening(app, runner, site)
