"""Models (SPEC §7.2): exact ids listed in their own API's shape, one model by id, patterns
refused, and a model sent to the other API's route told where it belongs."""

from __future__ import annotations

import aiohttp
import openai
import pytest

from clawpod.sidecar.manifest import Provider
from tests.sidecar.conftest import Pod, PodFactory
from tests.support.upstream import Reply, StubUpstream, anthropic_message, openai_completion

PROMPT = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def pod(make_pod: PodFactory, upstream: StubUpstream) -> Pod:
    providers = {
        "openai": Provider(
            api="openai",
            base_url=upstream.openai_url,
            key_env="OPENAI_API_KEY",
            models=["gpt-4o", "gpt-*", "o3-mini", "o3*"],
        ),
        "local": Provider(
            api="openai",
            base_url=upstream.openai_url,
            key_env="OPENAI_API_KEY",
            models=["llama-3.1-8b", "gpt-4o"],
        ),
        "anthropic": Provider(
            api="anthropic",
            base_url=upstream.anthropic_url,
            key_env="ANTHROPIC_API_KEY",
            models=["claude-sonnet-4-6", "claude-*"],
        ),
    }
    return await make_pod(providers=providers)


async def _get(pod: Pod, path: str, **headers: str) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {pod.token}", **headers}
    async with (
        aiohttp.ClientSession() as session,
        session.get(pod.sidecar.url + path, headers=headers) as response,
    ):
        return response.status, await response.json()


async def test_openai_clients_list_exact_ids_then_known_ids_their_globs_route(pod: Pod) -> None:
    models = await pod.openai().models.list()
    listed = [(m.id, m.owned_by) for m in models.data]
    assert listed[:3] == [("gpt-4o", "openai"), ("o3-mini", "openai"), ("llama-3.1-8b", "local")]
    known = listed[3:]
    assert ("gpt-4o-mini", "openai") in known and ("o3", "openai") in known
    assert all(m.startswith(("gpt-", "o3")) for m, _ in known)  # no claude-, no o1 or o4
    assert len({m for m, _ in listed}) == len(listed)


async def test_anthropic_clients_list_only_anthropic_ids(pod: Pod) -> None:
    page = await pod.anthropic().models.list()
    ids = [m.id for m in page.data]
    assert ids[0] == "claude-sonnet-4-6"
    assert "claude-haiku-4-5" in ids
    assert all(i.startswith("claude-") for i in ids)
    assert (page.first_id, page.last_id, page.has_more) == (ids[0], ids[-1], False)


async def test_one_model_by_id_in_each_shape(pod: Pod) -> None:
    found = await pod.openai().models.retrieve("gpt-4.1")  # allowed by a glob
    assert (found.id, found.owned_by) == ("gpt-4.1", "openai")
    assert (await pod.openai().models.retrieve("local/llama-3.1-8b")).owned_by == "local"
    info = await pod.anthropic().models.retrieve("claude-opus-4-1")
    assert info.id == "claude-opus-4-1" and info.type == "model"


async def test_a_model_not_allowed_is_404_in_the_callers_shape(pod: Pod) -> None:
    status, body = await _get(pod, "/v1/models/gemini-pro", **{"anthropic-version": "2023-06-01"})
    assert status == 404
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    with pytest.raises(openai.NotFoundError):
        await pod.openai().models.retrieve("gemini-pro")


async def test_a_model_of_the_other_api_is_found_in_the_callers_shape(pod: Pod) -> None:
    """Contract §18: a request may name it (it is translated), so it is found."""
    assert (await pod.openai().models.retrieve("claude-opus-4-1")).owned_by == "anthropic"
    assert (await pod.anthropic().models.retrieve("gpt-4o")).type == "model"


async def test_one_model_needs_a_token(pod: Pod) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(pod.sidecar.url + "/v1/models/gpt-4o") as response,
    ):
        assert response.status == 401


@pytest.mark.parametrize("pattern", ["gpt-*", "o3*", "gpt-4?", "gpt-[45]o"])
async def test_a_requested_pattern_is_refused(pod: Pod, pattern: str) -> None:
    for _ in range(2):  # routes are remembered per model: a refused pattern never is
        with pytest.raises(openai.BadRequestError) as raised:
            await pod.openai().chat.completions.create(model=pattern, messages=PROMPT)
        assert raised.value.code == "model_is_a_pattern"
    assert pod.upstream.received == []


async def test_a_claude_model_on_chat_completions_is_translated(pod: Pod) -> None:
    """Contract §18 replaces the wave-2 refusal naming the right route."""
    pod.upstream.enqueue("anthropic", Reply.json(anthropic_message("Hi.")))
    answer = await pod.openai().chat.completions.create(model="claude-sonnet-4-6", messages=PROMPT)
    assert answer.choices[0].message.content == "Hi."
    (sent,) = [r.json for r in pod.upstream.requests_to("anthropic")]
    assert sent["messages"][0]["role"] == "user" and sent["max_tokens"] > 0


async def test_a_gpt_model_on_messages_is_translated(pod: Pod) -> None:
    pod.upstream.enqueue("openai", Reply.json(openai_completion("Hi.")))
    answer = await pod.anthropic().messages.create(model="gpt-4o", max_tokens=5, messages=PROMPT)
    assert answer.content[0].text == "Hi."
    (sent,) = [r.json for r in pod.upstream.requests_to("openai")]
    assert sent["max_completion_tokens"] == 5


async def test_a_glob_only_pod_lists_the_known_models_of_its_families(
    make_pod: PodFactory, upstream: StubUpstream
) -> None:
    """The example pods name only globs (the default providers); they listed nothing."""
    providers = {
        "openai": Provider(
            api="openai", base_url=upstream.openai_url, key_env="OPENAI_API_KEY", models=["gpt-*"]
        ),
        "local": Provider(
            api="openai", base_url=upstream.openai_url, key_env="OPENAI_API_KEY", models=["*"]
        ),
    }
    pod = await make_pod(providers=providers)
    models = await pod.openai().models.list()
    listed = [(m.id, m.owned_by) for m in models.data]
    assert ("gpt-4o-mini", "openai") in listed
    # '*' names no family: the table says nothing about what that server serves.
    assert all(owner == "openai" and m.startswith("gpt-") for m, owner in listed)
    for model_id, _ in listed:  # each listed id is one a request may name
        assert (await _get(pod, f"/v1/models/{model_id}"))[0] == 200
