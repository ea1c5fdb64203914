"""What cannot be carried to a provider of another protocol is refused before anything goes
upstream, in the caller's protocol, naming the provider and what is missing; stored objects
keep their owners across translation (contract §18)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from clawpod.sidecar.state.stored_objects import StoredRef
from tests.support import responses as rs
from tests.support.upstream import Reply
from tests.translation.conftest import MODEL, TranslatingPod, text_reply


async def _responses_error(pod: TranslatingPod, agent: str, **request: Any) -> Any:
    async with pod.openai(agent) as client:
        with pytest.raises(openai.APIStatusError) as raised:
            await client.responses.create(**request)
    return raised.value


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("conversation", "conv_123"),
        ("background", True),
        ("tools", [{"type": "file_search", "vector_store_ids": ["vs_1"]}]),
        ("input", [{"type": "item_reference", "id": "msg_1"}]),
    ],
)
async def test_responses_features_a_chat_server_lacks_are_refused(
    translating_pod: TranslatingPod, field: str, value: Any
) -> None:
    pod = translating_pod
    if field == "conversation":  # the agent's own (it would have created it through the sidecar)
        pod.sidecar.state.objects.record("plain", [StoredRef("conversation", value)])
    request: dict[str, Any] = {"model": MODEL["chat"], "input": "hi", field: value}
    error = await _responses_error(pod, "plain", **request)
    assert error.status_code == 400
    assert error.body["code"] == "untranslatable_request"
    message = error.body["message"]
    assert "provider 'local' speaks Chat Completions" in message
    assert field.split("_")[0] in message or "item_reference" in message or "file_search" in message
    assert error.response.headers["x-should-retry"] == "false"
    assert pod.sent("chat") == []


async def test_messages_server_tools_to_a_chat_server_are_refused_in_anthropic_shape(
    translating_pod: TranslatingPod,
) -> None:
    pod = translating_pod
    async with pod.anthropic("plain") as client:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(
                model=MODEL["chat"],
                max_tokens=64,
                messages=[{"role": "user", "content": "search"}],
                tools=[{"type": "web_search_20250305", "name": "web_search"}],
            )
    body = raised.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "provider 'local' speaks Chat Completions" in body["error"]["message"]
    assert "web_search_20250305" in body["error"]["message"]
    assert pod.sent("chat") == []


async def test_a_stored_response_id_cannot_continue_on_a_provider_that_stores_nothing(
    translating_pod: TranslatingPod,
) -> None:
    """The agent's own stored response (from the Responses provider) is refused for the Chat
    server, naming it; so is another agent's and one never issued, alike (nothing tells them
    apart: it was 404 for another agent's and unknown ids, 400 for its own)."""
    pod = translating_pod
    pod.script("responses", Reply.json(rs.response(rs.message("stored"), response_id="resp_own")))
    async with pod.openai("plain") as client:
        await client.responses.create(model=MODEL["responses"], input="hi")
    own = await _responses_error(
        pod, "plain", model=MODEL["chat"], input="more", previous_response_id="resp_own"
    )
    assert own.status_code == 400 and own.body["code"] == "untranslatable_request"
    assert "previous_response_id" in own.body["message"]
    for agent, named in (("other", "resp_own"), ("plain", "resp_never_issued")):
        refused = await _responses_error(
            pod, agent, model=MODEL["chat"], input="more", previous_response_id=named
        )
        assert (refused.status_code, refused.body["code"]) == (400, "untranslatable_request")
        assert refused.body["message"] == own.body["message"]
    assert pod.sent("chat") == []


async def test_a_translated_answer_id_is_not_a_stored_response(
    translating_pod: TranslatingPod,
) -> None:
    """The Chat server stored nothing: its translated answer's id continues nothing, for the
    agent that got it (mediated, which records the objects a reply names) or any other."""
    pod = translating_pod
    pod.script("chat", text_reply("chat", "fine"))
    async with pod.openai("analyst") as client:
        answer = await client.responses.create(model=MODEL["chat"], input="hi", store=True)
    assert answer.store is False
    for agent in ("analyst", "other"):
        error = await _responses_error(
            pod, agent, model=MODEL["responses"], input="more", previous_response_id=answer.id
        )
        assert error.status_code == 404 and error.body["code"] == "response_not_found"
    assert pod.sent("responses") == []


async def test_stop_sequences_to_a_responses_provider_are_refused(
    translating_pod: TranslatingPod,
) -> None:
    pod = translating_pod
    async with pod.openai("plain") as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(
                model=MODEL["responses"],
                messages=[{"role": "user", "content": "count"}],
                stop=["5"],
            )
    assert "provider 'gateway' speaks Responses" in raised.value.body["message"]
    assert "stop sequences" in raised.value.body["message"]


async def test_a_token_count_for_a_provider_of_another_protocol_is_estimated(
    translating_pod: TranslatingPod,
) -> None:
    """Claude Code counts tokens before it asks; a Chat server has no count_tokens route."""
    pod = translating_pod
    async with pod.anthropic("plain") as client:
        counted = await client.messages.count_tokens(
            model=MODEL["chat"], messages=[{"role": "user", "content": "hello there " * 100}]
        )
    assert counted.input_tokens > 100
    assert pod.upstream.received == []
    # A mediated agent's count includes the tools the sidecar will inject (contract §7.2).
    async with pod.anthropic("analyst") as client:
        mediated = await client.messages.count_tokens(
            model=MODEL["chat"], messages=[{"role": "user", "content": "hello there " * 100}]
        )
    assert mediated.input_tokens > counted.input_tokens + 50


async def test_a_stored_response_is_read_from_the_provider_that_stores_responses(
    translating_pod: TranslatingPod,
) -> None:
    """The pod's first OpenAI provider is the Chat-only one; a stored response lives at the
    provider that serves Responses, and is read there."""
    pod = translating_pod
    stored = rs.response(rs.message("stored"), response_id="resp_kept")
    pod.script("responses", Reply.json(stored))
    async with pod.openai("plain") as client:
        await client.responses.create(model=MODEL["responses"], input="hi")
        pod.upstream.enqueue("/v1/responses/resp_kept", Reply.json(stored))
        again = await client.responses.retrieve("resp_kept")
    assert again.id == "resp_kept"
    assert pod.upstream.received[-1].path == "/v1/responses/resp_kept"
    # Both providers share the stub's address here: the audit record says which was asked.
    read = next(
        r for r in reversed(pod.audit("plain")) if r.get("route", "").endswith("{response_id}")
    )
    assert read["provider"] == "gateway"
