"""Identity (docs/contract.md §4.1): agent tokens by Bearer or x-api-key, 401/403 in the
caller's shape, provider keys attached upstream, the agent token and unlisted headers never
forwarded."""

from __future__ import annotations

import aiohttp
import anthropic
import openai
import pytest

from tests.sidecar.conftest import Pod, PodFactory
from tests.support.builds import AgentSpec
from tests.support.sidecar import TEST_PROVIDER_KEYS
from tests.support.upstream import Reply, anthropic_message, openai_completion

OPENAI_BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC_BODY = {
    "model": "claude-haiku-4-5",
    "max_tokens": 16,
    "messages": OPENAI_BODY["messages"],
}


async def _post(pod: Pod, route: str, headers: dict[str, str], body: dict) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(pod.sidecar.url + route, json=body, headers=headers) as response,
    ):
        return response.status, await response.json()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer two words"},
        {"x-api-key": ""},
    ],
    ids=["none", "empty-bearer", "basic", "spaces", "empty-x-api-key"],
)
async def test_missing_or_malformed_token_is_401_in_both_shapes(pod: Pod, headers: dict) -> None:
    status, body = await _post(pod, "/v1/chat/completions", headers, OPENAI_BODY)
    assert status == 401
    assert body["error"]["type"] == "authentication_error"
    assert body["error"]["message"]
    status, body = await _post(pod, "/v1/messages", headers, ANTHROPIC_BODY)
    assert status == 401
    assert body["type"] == "error"
    assert body["error"]["type"] == "authentication_error"
    assert pod.upstream.received == []


@pytest.mark.parametrize("style", ["bearer", "x-api-key"])
async def test_unknown_token_is_403(pod: Pod, style: str) -> None:
    wrong = pod.token[:-2] + "xx"
    headers = {"Authorization": f"Bearer {wrong}"} if style == "bearer" else {"x-api-key": wrong}
    status, body = await _post(pod, "/v1/chat/completions", headers, OPENAI_BODY)
    assert (status, body["error"]["type"]) == (403, "permission_error")
    status, body = await _post(pod, "/v1/messages", headers, ANTHROPIC_BODY)
    assert (status, body["error"]["type"]) == (403, "permission_error")
    assert pod.token not in str(body)
    assert pod.upstream.received == []


async def test_sdks_raise_auth_errors(pod: Pod) -> None:
    with pytest.raises(openai.PermissionDeniedError):
        await pod.openai(token="claw_not-a-real-token").chat.completions.create(**OPENAI_BODY)
    with pytest.raises(anthropic.PermissionDeniedError):
        await pod.anthropic(token="claw_not-a-real-token").messages.create(**ANTHROPIC_BODY)
    bare = pod.openai(default_headers={"Authorization": ""})
    with pytest.raises(openai.AuthenticationError):
        await bare.chat.completions.create(**OPENAI_BODY)


async def test_each_agent_is_identified_by_its_own_token(make_pod: PodFactory) -> None:
    pod = await make_pod([AgentSpec("alpha", mode="native"), AgentSpec("beta", mode="native")])
    pod.upstream.enqueue("openai", Reply.json(openai_completion()), Reply.json(openai_completion()))
    await pod.openai(token=pod.tokens["beta"]).chat.completions.create(**OPENAI_BODY)
    await pod.openai(token=pod.tokens["alpha"]).chat.completions.create(**OPENAI_BODY)
    assert len(pod.audit_lines("alpha")) == len(pod.audit_lines("beta")) == 1


async def test_openai_upstream_gets_provider_key_never_the_agent_token(pod: Pod) -> None:
    pod.upstream.enqueue("openai", Reply.json(openai_completion()))
    client = pod.openai(
        organization="org-123", default_headers={"X-Secret-Thing": "do-not-forward"}
    )
    await client.chat.completions.create(**OPENAI_BODY)
    seen = pod.upstream.received[-1]
    assert seen.headers["Authorization"] == f"Bearer {TEST_PROVIDER_KEYS['OPENAI_API_KEY']}"
    assert "OpenAI-Organization" not in seen.headers  # who pays is the pod's to say
    assert "x-api-key" not in seen.headers
    assert "X-Secret-Thing" not in seen.headers
    assert pod.token not in str(dict(seen.headers))


@pytest.mark.parametrize("sdk_auth", ["api_key", "auth_token"])
async def test_anthropic_upstream_gets_x_api_key_and_version(pod: Pod, sdk_auth: str) -> None:
    pod.upstream.enqueue("anthropic", Reply.json(anthropic_message()))
    client = anthropic.AsyncAnthropic(
        base_url=pod.sidecar.anthropic_base_url,
        max_retries=0,
        default_headers={"anthropic-beta": "tools-2024-04-04"},
        **{sdk_auth: pod.token},  # api_key sends x-api-key, auth_token sends Bearer
    )
    pod.clients.append(client)
    await client.messages.create(**ANTHROPIC_BODY)
    seen = pod.upstream.received[-1]
    assert seen.headers["x-api-key"] == TEST_PROVIDER_KEYS["ANTHROPIC_API_KEY"]
    assert seen.headers["anthropic-version"] == client.default_headers["anthropic-version"]
    assert seen.headers["anthropic-beta"] == "tools-2024-04-04"
    assert "Authorization" not in seen.headers
    assert pod.token not in str(dict(seen.headers))


async def test_anthropic_version_defaults_when_client_sends_none(pod: Pod) -> None:
    pod.upstream.enqueue("anthropic", Reply.json(anthropic_message()))
    status, _ = await _post(pod, "/v1/messages", {"x-api-key": pod.token}, ANTHROPIC_BODY)
    assert status == 200
    assert pod.upstream.received[-1].headers["anthropic-version"] == "2023-06-01"


async def test_client_anthropic_version_is_passed_through(pod: Pod) -> None:
    pod.upstream.enqueue("anthropic", Reply.json(anthropic_message()))
    headers = {"x-api-key": pod.token, "anthropic-version": "2099-01-01"}
    await _post(pod, "/v1/messages", headers, ANTHROPIC_BODY)
    assert pod.upstream.received[-1].headers.getall("anthropic-version") == ["2099-01-01"]


async def test_missing_provider_key_sends_no_auth_upstream(make_pod: PodFactory) -> None:
    pod = await make_pod(env={})
    pod.upstream.enqueue("openai", Reply.error("openai", 401, "No API key provided."))
    with pytest.raises(openai.AuthenticationError, match="No API key provided"):
        await pod.openai().chat.completions.create(**OPENAI_BODY)
    seen = pod.upstream.received[-1]
    assert "Authorization" not in seen.headers
