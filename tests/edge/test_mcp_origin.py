"""Issue 13 finding 9: ``/mcp`` checks Host and Origin against the sidecar's own names
(sidecar.json ``allowed_hosts``), not Origin against Host, which agree after a DNS rebinding."""

from __future__ import annotations

import aiohttp
import pytest

from tests.edge.conftest import EdgePodFactory
from tests.sidecar.conftest import Pod

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "edge-test", "version": "1"},
    },
}


async def initialize(pod: Pod, **headers: str) -> tuple[int, dict]:
    headers = {
        "Authorization": f"Bearer {pod.token}",
        "Accept": "application/json, text/event-stream",
        **headers,
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(pod.sidecar.url + "/mcp", json=INITIALIZE, headers=headers) as response,
    ):
        body = await response.json(content_type=None) if response.status != 200 else {}
        return response.status, body


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example", "Origin": "http://evil.example"},  # the rebinding: they agree
        {"Host": "evil.example:8080"},
        {"Host": "127.0.0.1.evil.example"},
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Host": "[::1"},
    ],
)
async def test_foreign_names_are_refused(pod: Pod, headers: dict[str, str]) -> None:
    status, body = await initialize(pod, **headers)
    assert status == 403
    assert body["jsonrpc"] == "2.0" and body["error"]["message"].startswith("Forbidden")


@pytest.mark.parametrize(
    "headers",
    [
        {},  # the client's own Host: 127.0.0.1:PORT
        {"Host": "claw-sidecar:8080"},
        {"Host": "LOCALHOST"},
        {"Host": "[::1]:8080", "Origin": "http://localhost:3000"},
        {"Origin": "http://127.0.0.1"},
    ],
)
async def test_the_sidecars_own_names_are_allowed(pod: Pod, headers: dict[str, str]) -> None:
    assert (await initialize(pod, **headers))[0] == 200


async def test_the_allow_list_comes_from_sidecar_json(make_edge_pod: EdgePodFactory) -> None:
    pod = await make_edge_pod(allowed_hosts=["my-sidecar"])
    assert (await initialize(pod, Host="my-sidecar:8080"))[0] == 200
    assert (await initialize(pod, Host="claw-sidecar:8080"))[0] == 403
