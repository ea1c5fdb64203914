"""/healthz, /readyz, /v1/models, /metrics and the /mcp authentication gate; /readyz and
/metrics on the operator listener only."""

from __future__ import annotations

import shutil

import aiohttp
import openai

from tests.sidecar.conftest import Pod
from tests.support.upstream import Reply, openai_completion


async def _get(pod: Pod, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    return await _get_from(pod.sidecar.url, path, headers)


async def _admin_get(pod: Pod, path: str) -> tuple[int, str]:
    return await _get_from(pod.sidecar.admin_url, path)


async def _get_from(base: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(base + path, headers=headers) as response,
    ):
        return response.status, await response.text()


async def test_healthz_and_readyz(pod: Pod) -> None:
    assert await _get(pod, "/healthz") == (200, '{"status": "ok"}')
    status, body = await _admin_get(pod, "/readyz")
    assert status == 200 and '"ready"' in body


async def test_operator_routes_are_not_on_the_agents_port(pod: Pod) -> None:
    """Issue 13 finding 8: an agent must not read other agents' ids or every tool's counts."""
    for path in ("/metrics", "/readyz"):
        status, body = await _get(pod, path, {"Authorization": f"Bearer {pod.token}"})
        assert status == 404, (path, body)
        assert "claw_" not in body
    assert (await _admin_get(pod, "/healthz"))[0] == 404  # the healthcheck stays on the main port


async def test_unknown_paths_and_tokens_never_become_metric_labels(pod: Pod) -> None:
    for n in range(5):
        await _get(pod, f"/v1/made-up-{n}", {"Authorization": f"Bearer {pod.token}"})
        await _get(pod, "/v1/chat/completions", {"Authorization": f"Bearer claw_forged{n}"})
    _, text = await _admin_get(pod, "/metrics")
    assert "made-up" not in text and "forged" not in text


async def test_readyz_fails_when_the_state_dir_is_gone(pod: Pod) -> None:
    shutil.rmtree(pod.state_dir)
    status, body = await _admin_get(pod, "/readyz")
    assert status == 503
    assert "state directory" in body


async def test_models_needs_a_token(pod: Pod) -> None:
    status, _ = await _get(pod, "/v1/models")
    assert status == 401
    bad = pod.openai(token="claw_wrong")
    try:
        await bad.models.list()
    except openai.PermissionDeniedError:
        pass
    else:
        raise AssertionError("an unknown token listed models")


async def test_metrics_count_requests(pod: Pod) -> None:
    pod.upstream.enqueue("openai", Reply.json(openai_completion()))
    await pod.openai().chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    status, text = await _admin_get(pod, "/metrics")
    assert status == 200
    assert (
        'claw_requests_total{agent="agent",route="/v1/chat/completions",status="200"} 1.0' in text
    )
    assert 'claw_upstream_latency_seconds_count{provider="openai"} 1.0' in text
    assert "sk-test" not in text


async def test_mcp_rejects_missing_and_unknown_tokens_as_json_rpc(pod: Pod) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with aiohttp.ClientSession() as session:
        async with session.post(pod.sidecar.url + "/mcp", json=ping) as response:
            assert response.status == 401
            body = await response.json()
            assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32001
        headers = {"Authorization": "Bearer claw_wrong"}
        async with session.post(pod.sidecar.url + "/mcp", json=ping, headers=headers) as response:
            assert response.status == 403
            assert (await response.json())["error"]["message"]


async def test_mcp_serves_an_authenticated_agent(pod: Pod) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-03-26",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    headers = {
        "Authorization": f"Bearer {pod.token}",
        "Accept": "application/json, text/event-stream",
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(pod.sidecar.url + "/mcp", json=initialize, headers=headers) as response,
    ):
        assert response.status == 200
        assert "result" in await response.text()
