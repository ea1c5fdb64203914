"""Fixtures for the outbound client tests: scripted servers (closed after the test) and a
client."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from clawpod.sidecar.transport import HttpClient

from tests.transport.raw_server import RawServer, Script


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
