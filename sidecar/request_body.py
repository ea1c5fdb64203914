"""An inbound request's body read into one buffer, for every route that takes a large body.

aiohttp's ``Request.read`` gathers the chunks and then joins them: twice the body at its peak.
Sized once from Content-Length (else grown as chunks come), the body is held once; one that
arrived whole before it is read is the parser's own buffer."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web


def no_accounting(size: int) -> None:
    """A ``take`` that accounts nothing."""


async def read_body_once(
    request: web.Request, limit: int, take: Callable[[int], None] = no_accounting
) -> bytes | bytearray | None:
    """The whole body, or None when it is over ``limit`` bytes. ``take`` is told each size of
    memory the body is given before it is (it may refuse by raising)."""
    length = request.content_length
    if length is not None and length > limit:
        return None
    if length is not None:
        take(length)
        content = request.content
        if content.is_eof():  # it all came with the head (most bodies): taken as it lies
            return content.read_nowait()
        body = bytearray(length)
        view = memoryview(body)
        filled = 0
        async for chunk in request.content.iter_any():
            view[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
        view.release()
        return body
    body = bytearray()
    async for chunk in request.content.iter_any():
        if len(body) + len(chunk) > limit:
            return None
        take(len(chunk))
        body += chunk
    return body
