"""Every private aiohttp name the edge relies on, in one place, checked at start-up.

aiohttp has no public hook for per-connection deadlines, byte counts or a custom connection
class, so the edge (``server/front/edge.py``) subclasses its low-level server, request handler and
runner. What those subclasses read of aiohttp's internals is named only here, behind public
names; :func:`check` runs when the edge starts, so an aiohttp release that renames one fails
at once, naming the version and what is missing, instead of mid-request. pyproject.toml bounds
aiohttp to the minor versions the edge suite ran on.
"""

from __future__ import annotations

import asyncio
from operator import attrgetter

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

# The private attributes read on each class. RequestHandler and its base keep theirs in
# __slots__, so the class itself shows them; web.Server sets its own in __init__.
HANDLER_NAMES = (
    "_loop",
    "_manager",
    "_messages",
    "_request_count",
    "_request_in_progress",
    "_reading_paused",
    "_buffer_paused",
)
SERVER_NAMES = ("_loop", "_kwargs")
RUNNER_NAMES = ("_make_server",)


class AiohttpIncompatible(RuntimeError):
    """The installed aiohttp lacks a private name the edge relies on."""


def missing_names() -> list[str]:
    """``Class.name`` of every private name the installed aiohttp lacks."""
    missing = [f"RequestHandler.{n}" for n in HANDLER_NAMES if not hasattr(RequestHandler, n)]
    missing += [f"AppRunner.{n}" for n in RUNNER_NAMES if not hasattr(web.AppRunner, n)]
    loop = asyncio.new_event_loop()
    try:
        server = web.Server(_no_handler, loop=loop)
    finally:
        loop.close()
    missing += [f"Server.{n}" for n in SERVER_NAMES if not hasattr(server, n)]
    return missing


def check() -> None:
    """Refuse to start on an aiohttp whose internals the edge cannot use."""
    missing = missing_names()
    if missing:
        raise AiohttpIncompatible(
            f"aiohttp {aiohttp.__version__} lacks {', '.join(missing)}, which the sidecar's "
            "edge relies on; install a version pyproject.toml allows"
        )


async def _no_handler(request: web.BaseRequest) -> web.StreamResponse:
    raise NotImplementedError  # never called: the server only shows its attributes


# The public names below read aiohttp's private ones with C-level getters: no call into this
# module on the hot path (every chunk a connection receives), and none on a request's trip.


class ServerBase(web.Server):
    """aiohttp's low-level server, its state read through public names."""

    event_loop = property(attrgetter("_loop"))
    connection_options = property(attrgetter("_kwargs"))
    """The keyword arguments of each connection it makes (``web.Server.__call__``)."""


class HandlerBase(RequestHandler):
    """aiohttp's per-connection request handler, its state read through public names."""

    event_loop = property(attrgetter("_loop"))
    manager = property(attrgetter("_manager"))
    """The server that made this connection; None once the connection is lost."""
    queued_requests = property(attrgetter("_messages"))
    """Parsed requests (message, payload) waiting for their turn to be answered."""
    requests_parsed = property(attrgetter("_request_count"))
    """Request heads parsed on this connection so far."""
    request_in_progress = property(attrgetter("_request_in_progress"))
    """A request is being answered now."""
    pause_flags = property(attrgetter("_reading_paused", "_buffer_paused"))
    """aiohttp stopped reading the socket (backpressure), in either of its two ways."""


class RunnerBase(web.AppRunner):
    """An ``AppRunner`` whose server is made from the plain one by :meth:`wrap_server`."""

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()  # runs the app's start-up hooks and freezes it
        return self.wrap_server(plain)

    def wrap_server(self, plain: web.Server) -> web.Server:
        return plain
