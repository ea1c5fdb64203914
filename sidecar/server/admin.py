"""The operator listener's app: ``/metrics``, ``/readyz``, the operator API and the console.

Served on its own port (``--admin-port``, sidecar.json ``admin_listen``), which the generated
compose file attaches only to a network agents are not on: an agent must see nothing about
other agents (their ids, every tool's call counts). It shares the main app's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiohttp import web

from .console import add_console
from .context import STATE_KEY, SidecarState
from .operator import add_operator_routes
from .routes import metrics_route, readyz

RouteAdder = Callable[[web.UrlDispatcher], None]

# Functions that add ``/operator/*`` routes (handlers read ``request.app[STATE_KEY]``).
OPERATOR_ROUTES: list[RouteAdder] = [add_operator_routes]


def create_admin_app(
    state: SidecarState, add_operator_routes: Iterable[RouteAdder] = OPERATOR_ROUTES
) -> web.Application:
    """The operator app over ``state``; its lifecycle belongs to the main app."""
    app = web.Application()
    app[STATE_KEY] = state
    app.router.add_get("/metrics", metrics_route)
    app.router.add_get("/readyz", readyz)
    for add_routes in add_operator_routes:
        add_routes(app.router)
    add_console(app)  # /console: the operator's web pages (SPEC §15)
    return app
