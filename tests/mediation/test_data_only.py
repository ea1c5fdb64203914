"""Requests that want data, not actions (SPEC §7.3): no tools of their own and structured output
asked for go through without injection, unless the agent says ``tool-injection: always``."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from tests.mediation.conftest import MediatedPod, PodFactory
from tests.mediation.scripted import an_text, oa_text
from tests.support.responses import message, response
from tests.support.upstream import Reply

SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
ASK = [{"role": "user", "content": "Give this session a title."}]
OPENAI_ASK = {"model": "gpt-4o", "messages": ASK}
ANTHROPIC_ASK = {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": ASK}
TOOL = {
    "type": "function",
    "function": {"name": "notify", "parameters": {"type": "object", "properties": {}}},
}
# (route, upstream route, body, reply): every way a protocol asks for structured output.
DATA_REQUESTS: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    "chat json_schema": (
        "/v1/chat/completions",
        "openai",
        {
            **OPENAI_ASK,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "t", "schema": SCHEMA},
            },
        },
        oa_text('{"title": "x"}'),
    ),
    "chat json_object": (
        "/v1/chat/completions",
        "openai",
        {**OPENAI_ASK, "response_format": {"type": "json_object"}},
        oa_text('{"title": "x"}'),
    ),
    "responses text.format": (
        "/v1/responses",
        "responses",
        {
            "model": "gpt-4o",
            "input": "Give this session a title.",
            "text": {"format": {"type": "json_schema", "name": "t", "schema": SCHEMA}},
        },
        response(message('{"title": "x"}')),
    ),
    "messages output_format": (
        "/v1/messages",
        "anthropic",
        {**ANTHROPIC_ASK, "output_format": {"type": "json_schema", "schema": SCHEMA}},
        an_text('{"title": "x"}'),
    ),
    "messages output_config.format": (
        "/v1/messages",
        "anthropic",
        {**ANTHROPIC_ASK, "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
        an_text('{"title": "x"}'),
    ),
}


async def post(pod: MediatedPod, route: str, body: dict[str, Any]) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {pod.tokens['analyst']}"}
    if route == "/v1/messages":
        headers["anthropic-version"] = "2023-06-01"
    async with (
        aiohttp.ClientSession() as session,
        session.post(pod.sidecar.url + route, json=body, headers=headers) as response,
    ):
        return response.status, await response.text()


@pytest.mark.parametrize("case", list(DATA_REQUESTS))
async def test_a_request_for_data_gets_no_tools(pod: MediatedPod, case: str) -> None:
    route, upstream_route, body, reply = DATA_REQUESTS[case]
    pod.upstream.enqueue(upstream_route, Reply.json(reply))
    status, text = await post(pod, route, body)
    assert status == 200, text
    (sent,) = pod.sent(upstream_route)
    assert "tools" not in sent
    assert sent == body  # passed through as the client sent it


@pytest.mark.parametrize("case", list(DATA_REQUESTS))
async def test_tool_injection_always_injects_into_requests_for_data(
    make_pod: PodFactory, case: str
) -> None:
    pod = await make_pod(tool_injection="always")
    route, upstream_route, body, reply = DATA_REQUESTS[case]
    pod.upstream.enqueue(upstream_route, Reply.json(reply))
    status, text = await post(pod, route, body)
    assert status == 200, text
    (sent,) = pod.sent(upstream_route)
    assert "desk_quote" in str(sent["tools"])


async def test_a_request_for_data_that_declares_tools_is_mediated(pod: MediatedPod) -> None:
    body = {**OPENAI_ASK, "tools": [TOOL], "response_format": {"type": "json_object"}}
    pod.upstream.enqueue("openai", Reply.json(oa_text('{"title": "x"}')))
    status, text = await post(pod, "/v1/chat/completions", body)
    assert status == 200, text
    (sent,) = pod.sent("openai")
    assert [t["function"]["name"] for t in sent["tools"]][:2] == ["notify", "desk_quote"]


async def test_plain_text_format_is_not_a_request_for_data(pod: MediatedPod) -> None:
    body = {**OPENAI_ASK, "response_format": {"type": "text"}}
    pod.upstream.enqueue("openai", Reply.json(oa_text("a title")))
    status, text = await post(pod, "/v1/chat/completions", body)
    assert status == 200, text
    (sent,) = pod.sent("openai")
    assert "desk_quote" in str(sent["tools"])
