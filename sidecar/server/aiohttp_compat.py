"""Every private aiohttp name the edge relies on, in one place, checked at start-up.

aiohttp has no public hook for per-connection deadlines, byte counts or a custom connection
class, so the edge (``server/edge.py``) subclasses its low-level server, request handler and
runner. What those subclasses read of aiohttp's internals is named only here, behind public
names; :func:`check` runs when the edge starts, so an aiohttp release that renames one fails
at once, naming the version and what is missing, instead of mid-request. pyproject.toml bounds
aiohttp to the minor versions the edge suite ran on.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, TypeVar

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


Connection = TypeVar("Connection", bound="HandlerBase")


class ServerBase(web.Server):
    """aiohttp's low-level server, able to make connections of a subclass of ours."""

    def make_connection(self, connection_class: type[Connection]) -> Connection:
        """A connection as ``web.Server.__call__`` makes one, of ``connection_class``."""
        return connection_class(self, loop=self._loop, **self._kwargs)


class HandlerBase(RequestHandler):
    """aiohttp's per-connection request handler, its state read through public names."""

    @property
    def event_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def manager(self) -> web.Server | None:
        """The server that made this connection; None once the connection is lost."""
        return self._manager

    @property
    def queued_requests(self) -> deque[tuple[Any, Any]]:
        """Parsed requests (message, payload) waiting for their turn to be answered."""
        return self._messages

    @property
    def requests_parsed(self) -> int:
        """Request heads parsed on this connection so far."""
        return self._request_count

    @property
    def request_in_progress(self) -> bool:
        """A request is being answered now."""
        return self._request_in_progress

    @property
    def reading_paused(self) -> bool:
        """aiohttp stopped reading the socket (backpressure), either way it does."""
        return self._reading_paused or self._buffer_paused


class RunnerBase(web.AppRunner):
    """An ``AppRunner`` whose server is made from the plain one by :meth:`wrap_server`."""

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()  # runs the app's start-up hooks and freezes it
        return self.wrap_server(plain)

    def wrap_server(self, plain: web.Server) -> web.Server:
        return plain
