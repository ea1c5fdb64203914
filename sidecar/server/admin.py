"""The operator listener's app: ``/metrics``, ``/readyz``, the operator API and the console.

Served on its own port (``--admin-port``, sidecar.json ``admin_listen``), which the generated
compose file attaches only to a network agents are not on: an agent must see nothing about
other agents (their ids, every tool's call counts). It shares the main app's state.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping

from aiohttp import web

from .operator.console import add_console
from .operator.operator import add_operator_routes
from .operator.operator_auth import SIGN_IN_KEY, SignInThrottle, host_check, operator_hosts
from .request.context import STATE_KEY, SidecarState
from .routes import metrics_route, readyz

RouteAdder = Callable[[web.UrlDispatcher], None]

# Functions that add ``/operator/*`` routes (handlers read ``request.app[STATE_KEY]``).
OPERATOR_ROUTES: list[RouteAdder] = [add_operator_routes]


def create_admin_app(
    state: SidecarState,
    add_operator_routes: Iterable[RouteAdder] = OPERATOR_ROUTES,
    *,
    env: Mapping[str, str] | None = None,
    listen_host: str | None = None,
) -> web.Application:
    """The operator app over ``state``; its lifecycle belongs to the main app. It answers to
    the names ``operator_auth.operator_hosts`` lists (``listen_host``: the address it is bound
    to, when a name; ``env``: for ``CLAW_OPERATOR_HOSTS``)."""
    config = state.config
    names = (*config.allowed_hosts, config.admin_listen.host, listen_host or "")
    allowed = operator_hosts(names, os.environ if env is None else env)
    app = web.Application(middlewares=[host_check(allowed)])
    app[STATE_KEY] = state
    app[SIGN_IN_KEY] = SignInThrottle()
    app.router.add_get("/metrics", metrics_route)
    app.router.add_get("/readyz", readyz)
    for add_routes in add_operator_routes:
        add_routes(app.router)
    add_console(app)  # /console: the operator's web pages (SPEC §15)
    return app
