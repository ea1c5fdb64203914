"""A mediated agent's token counts include its managed tools; an Anthropic server-held thread
is refused rather than forwarded into every hidden call (SPEC §7.2)."""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import pytest

from tests.mediation.conftest import MediatedPod
from tests.support.upstream import Reply

ASK = [{"role": "user", "content": "What is AAPL at?"}]
RUNNER_TOOL = {
    "name": "notify_user",
    "description": "runner-side",
    "input_schema": {"type": "object", "properties": {}},
}
MANAGED = ["desk_quote", "desk_trade", "desk_slow"]


async def post(pod: MediatedPod, route: str, body: dict[str, Any]) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {pod.tokens['analyst']}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(pod.sidecar.url + route, json=body, headers=headers) as response,
    ):
        return response.status, await response.json()


async def test_count_tokens_counts_the_managed_tools(pod: MediatedPod) -> None:
    route = "/v1/messages/count_tokens"
    pod.upstream.enqueue(route, Reply.json({"input_tokens": 321}))
    client = pod.anthropic()
    counted = await client.messages.count_tokens(
        model="claude-sonnet-4-6", messages=ASK, tools=[RUNNER_TOOL]
    )
    assert counted.input_tokens == 321
    (sent,) = [r.json for r in pod.upstream.requests_to(route)]
    assert [t["name"] for t in sent["tools"]] == ["notify_user", *MANAGED]
    assert sent["tools"][1]["input_schema"]["required"] == ["symbol"]
    assert sent["messages"] == ASK


async def test_count_tokens_of_a_request_for_data_is_untouched(pod: MediatedPod) -> None:
    # Such a request is passed through without tools (§7.3), so it is counted without them.
    route = "/v1/messages/count_tokens"
    pod.upstream.enqueue(route, Reply.json({"input_tokens": 7}))
    body = {
        "model": "claude-sonnet-4-6",
        "messages": ASK,
        "output_format": {"type": "json_schema", "schema": {"type": "object"}},
    }
    status, _ = await post(pod, route, body)
    assert status == 200
    (sent,) = [r.json for r in pod.upstream.requests_to(route)]
    assert sent == body


async def test_responses_input_tokens_counts_the_managed_tools(pod: MediatedPod) -> None:
    route = "/v1/responses/input_tokens"
    pod.upstream.enqueue(route, Reply.json({"object": "response.input_tokens", "input_tokens": 9}))
    status, answer = await post(pod, route, {"model": "gpt-4o", "input": "What is AAPL at?"})
    assert (status, answer["input_tokens"]) == (200, 9)
    (sent,) = [r.json for r in pod.upstream.requests_to(route)]
    assert [t["name"] for t in sent["tools"]] == MANAGED
    assert sent["tools"][0]["type"] == "function"


async def test_an_anthropic_thread_is_refused_on_a_mediated_agent(pod: MediatedPod) -> None:
    client = pod.anthropic()
    with pytest.raises(anthropic.BadRequestError) as raised:
        await client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=64,
            messages=ASK,
            extra_body={"thread": {"id": "thread_1"}},
        )
    assert "disable it" in raised.value.message
    assert raised.value.body["error"]["type"] == "invalid_request_error"
    assert pod.upstream.received == []
