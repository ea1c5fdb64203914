"""Model routing (docs/contract.md §4.1): explicit provider prefixes, glob matching per API,
clear 400s; request-shape errors (bad JSON, body limit, unknown routes) in the caller's protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import anthropic
import openai
import pytest

from clawpod.sidecar.manifest import Provider
from tests.sidecar.conftest import Pod, PodFactory
from tests.support.builds import AgentSpec, http_tool
from tests.support.sidecar import TEST_PROVIDER_KEYS
from tests.support.upstream import Reply, StubUpstream, anthropic_message, openai_completion

PROMPT = [{"role": "user", "content": "hi"}]


async def _post_raw(
    pod: Pod, route: str, data: bytes | AsyncIterator[bytes], headers: dict[str, str] | None = None
) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {pod.token}", **(headers or {})}
    async with (
        aiohttp.ClientSession() as session,
        session.post(pod.sidecar.url + route, data=data, headers=headers) as response,
    ):
        return response.status, await response.json()


async def test_provider_prefix_is_stripped_and_selects_the_provider(
    make_pod: PodFactory, upstream: StubUpstream
) -> None:
    async with StubUpstream() as local:
        providers = {
            "openai": Provider(
                api="openai", base_url=upstream.openai_url, key_env="OPENAI_API_KEY", models=["*"]
            ),
            "local": Provider(
                api="openai", base_url=local.openai_url, key_env="LOCAL_KEY", models=["llama*"]
            ),
        }
        pod = await make_pod(providers=providers, env={"OPENAI_API_KEY": "k1", "LOCAL_KEY": "k2"})
        local.enqueue("openai", Reply.json(openai_completion()))
        await pod.openai().chat.completions.create(model="local/llama-3", messages=PROMPT)
        assert local.received[-1].json["model"] == "llama-3"
        assert local.received[-1].headers["Authorization"] == "Bearer k2"
        # Without the prefix the first provider whose globs match wins.
        upstream.enqueue("openai", Reply.json(openai_completion()))
        await pod.openai().chat.completions.create(model="llama-3", messages=PROMPT)
        assert upstream.received[-1].json["model"] == "llama-3"
        assert len(local.received) == 1


async def test_prefixed_body_is_re_serialised_with_everything_else_intact(pod: Pod) -> None:
    pod.upstream.enqueue("anthropic", Reply.json(anthropic_message()))
    await pod.anthropic().messages.create(
        model="anthropic/claude-haiku-4-5", max_tokens=7, messages=PROMPT, stop_sequences=["END"]
    )
    sent = pod.upstream.received[-1].json
    assert sent == {
        "model": "claude-haiku-4-5",
        "max_tokens": 7,
        "messages": PROMPT,
        "stop_sequences": ["END"],
    }


async def test_globs_route_by_api(pod: Pod) -> None:
    pod.upstream.enqueue("openai", Reply.json(openai_completion()))
    pod.upstream.enqueue("anthropic", Reply.json(anthropic_message()))
    await pod.openai().chat.completions.create(model="o3-mini", messages=PROMPT)
    await pod.anthropic().messages.create(model="claude-opus-4", max_tokens=5, messages=PROMPT)
    assert [r.path for r in pod.upstream.received] == ["/v1/chat/completions", "/v1/messages"]


async def test_unknown_model_is_400_listing_allowed_models(pod: Pod) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await pod.openai().chat.completions.create(model="gemini-pro", messages=PROMPT)
    assert "gpt-*" in raised.value.message and "o*" in raised.value.message
    assert raised.value.code == "model_not_allowed"
    with pytest.raises(anthropic.BadRequestError) as raised_a:
        await pod.anthropic().messages.create(model="gemini-pro", max_tokens=5, messages=PROMPT)
    assert "claude-*" in str(raised_a.value)
    assert pod.upstream.received == []


async def test_prefix_of_a_provider_for_the_other_api_selects_it_translated(pod: Pod) -> None:
    """Contract §18 replaces the wave-2 400 that named the other route."""
    pod.upstream.enqueue("anthropic", Reply.json(anthropic_message("Hi.")))
    answer = await pod.openai().chat.completions.create(
        model="anthropic/claude-haiku-4-5", messages=PROMPT
    )
    assert answer.choices[0].message.content == "Hi."
    (sent,) = [r.json for r in pod.upstream.requests_to("anthropic")]
    assert sent["model"] == "claude-haiku-4-5"


async def test_prefix_does_not_bypass_the_providers_globs(pod: Pod) -> None:
    with pytest.raises(openai.BadRequestError, match="not allowed"):
        await pod.openai().chat.completions.create(model="openai/llama-3", messages=PROMPT)


@pytest.mark.parametrize("body", [b"", b"{not json", b"[1, 2]", b'{"messages": []}'])
async def test_bad_bodies_are_400_in_shape(pod: Pod, body: bytes) -> None:
    status, error = await _post_raw(pod, "/v1/chat/completions", body)
    assert status == 400
    assert error["error"]["type"] == "invalid_request_error"
    status, error = await _post_raw(pod, "/v1/messages", body)
    assert status == 400
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert len(pod.audit_lines()) == 2  # authenticated failures are audited too


async def test_body_over_the_limit_is_413_in_shape(make_pod: PodFactory) -> None:
    pod = await make_pod(max_body_bytes=1024)
    big = "x" * 2048
    with pytest.raises(openai.APIStatusError) as raised:
        await pod.openai().chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": big}]
        )
    assert raised.value.status_code == 413
    assert raised.value.code == "request_too_large"
    with pytest.raises(anthropic.APIStatusError) as raised_a:
        await pod.anthropic().messages.create(
            model="claude-haiku-4-5", max_tokens=5, messages=[{"role": "user", "content": big}]
        )
    assert raised_a.value.status_code == 413
    assert raised_a.value.body["error"]["type"] == "request_too_large"

    # Without Content-Length (chunked upload) the limit still holds.
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"model": "gpt-4o", "messages": "'
        yield b"x" * 4096
        yield b'"}'

    status, error = await _post_raw(pod, "/v1/chat/completions", chunks())
    assert status == 413 and error["error"]["code"] == "request_too_large"
    assert pod.upstream.received == []


async def test_unknown_route_and_wrong_method_are_shaped(pod: Pod) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(pod.sidecar.url + "/v1/nothing") as response:
            assert response.status == 404
            assert (await response.json())["error"]["code"] == "not_found"
        async with session.get(pod.sidecar.url + "/v1/messages") as response:
            assert response.status == 405
            assert (await response.json())["type"] == "error"


async def test_anthropic_count_tokens_is_passed_through(make_pod: PodFactory) -> None:
    # Counting calls no model; for a mediated agent it counts the tools the model would see.
    tool = http_tool("svc", "lookup", "http://127.0.0.1:9")
    pod = await make_pod([AgentSpec("agent", mode="mediated", tools=[tool])])
    pod.upstream.enqueue("/v1/messages/count_tokens", Reply.json({"input_tokens": 12}))
    counted = await pod.anthropic().messages.count_tokens(
        model="anthropic/claude-haiku-4-5", messages=PROMPT
    )
    assert counted.input_tokens == 12
    seen = pod.upstream.received[-1]
    assert seen.path == "/v1/messages/count_tokens"
    assert seen.json["model"] == "claude-haiku-4-5" and seen.json["messages"] == PROMPT
    assert [t["name"] for t in seen.json["tools"]] == ["svc_lookup"]
    assert seen.headers["x-api-key"] == TEST_PROVIDER_KEYS["ANTHROPIC_API_KEY"]
