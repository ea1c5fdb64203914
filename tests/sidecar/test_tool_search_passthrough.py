"""A runner's own deferred loading reaches its provider unchanged in pass-through (SPEC §23):
Anthropic's tool search tool with ``defer_loading`` tools and the ``tool_reference`` blocks of
an earlier search, OpenAI Responses' ``tool_search`` with deferred functions, and Chat
Completions tools carrying ``defer_loading`` (as gateways accept it)."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from tests.sidecar.conftest import Pod
from tests.support import responses as rs
from tests.support.upstream import Reply, anthropic_message, openai_completion

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}

MESSAGES = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 64,
    "tools": [
        {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"},
        {"name": "get_weather", "input_schema": WEATHER_SCHEMA, "defer_loading": True},
    ],
    "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_1",
                    "name": "tool_search_tool_bm25",
                    "input": {"query": "weather"},
                },
                {
                    "type": "tool_search_tool_result",
                    "tool_use_id": "srvtoolu_1",
                    "content": {
                        "type": "tool_search_tool_search_result",
                        "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}],
                    },
                },
            ],
        },
        {"role": "user", "content": "go on"},
    ],
}
RESPONSES = {
    "model": "gpt-5",
    "input": "Weather in Oslo?",
    "tools": [
        {"type": "tool_search"},
        {
            "type": "function",
            "name": "get_weather",
            "parameters": WEATHER_SCHEMA,
            "defer_loading": True,
        },
    ],
}
CHAT = {
    "model": "gpt-4o",
    "messages": [{"role": "user", "content": "Weather in Oslo?"}],
    "tools": [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA},
            "defer_loading": True,
        }
    ],
}
CASES = [
    ("anthropic", "/v1/messages", MESSAGES, anthropic_message()),
    ("/v1/responses", "/v1/responses", RESPONSES, rs.response(rs.message("sunny"))),
    ("openai", "/v1/chat/completions", CHAT, openai_completion()),
]


@pytest.mark.parametrize(("route", "path", "body", "reply"), CASES)
async def test_deferred_loading_fields_pass_through_unchanged(
    pod: Pod, route: str, path: str, body: dict[str, Any], reply: dict[str, Any]
) -> None:
    pod.upstream.enqueue(route, Reply.json(reply))
    sent = orjson.dumps(body)
    headers = {
        "Authorization": f"Bearer {pod.token}",
        "x-api-key": pod.token,
        "Content-Type": "application/json",
        "anthropic-beta": "advanced-tool-use-2025-11-20",
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(pod.sidecar.url + path, data=sent, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
    [received] = pod.upstream.requests_to(route)
    assert received.json == body
    if route == "anthropic":
        assert received.headers["anthropic-beta"] == "advanced-tool-use-2025-11-20"
