"""The aiohttp driver of the mediation engine: all I/O of a mediated request lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from sidecar.server.context import RequestContext


async def handle_mediated(
    request: web.Request, ctx: RequestContext, body: dict[str, Any]
) -> web.StreamResponse:
    raise web.HTTPNotImplemented(text="mediation engine not ready")
