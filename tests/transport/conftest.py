"""Fixtures for the outbound client tests: scripted servers (closed after the test) and a
client."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import pytest
import uvloop

from clawpod.sidecar.transport import HttpClient
from tests.transport.raw_server import RawServer, Script

# Whether a connection the server closed is noticed before it is reused depends on the order a
# loop handles events in; the sidecar runs on uvloop.
_BOTH_LOOPS_IN = ("test_reuse.py",)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.path.name in _BOTH_LOOPS_IN:
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}


@pytest.fixture
async def servers() -> AsyncIterator[Callable[..., Awaitable[RawServer]]]:
    started: list[RawServer] = []

    async def start(script: Script, ssl_context: ssl.SSLContext | None = None) -> RawServer:
        server = await RawServer(script).start(ssl_context)
        started.append(server)
        return server

    yield start
    for server in started:
        await server.close()


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    running = HttpClient(
        keepalive_s=30, connect_timeout_s=5, default_headers={"User-Agent": "test-agent"}
    )
    yield running
    await running.close()
