"""Deferred loading cannot be carried to a provider of another protocol (SPEC §23): a runner's
own tool search tool, or a tool marked ``defer_loading``, is refused before anything goes
upstream, in the caller's protocol, naming what it is. (The same fields pass through unchanged
to a provider of the caller's protocol: tests/sidecar/test_tool_search_passthrough.py.)"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from tests.translation.conftest import MODEL, TranslatingPod

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
ASK = [{"role": "user", "content": "Weather in Oslo?"}]


@pytest.mark.parametrize(
    ("tools", "named"),
    [
        ([{"name": "get_weather", "input_schema": SCHEMA, "defer_loading": True}], "defer_loading"),
        (
            [{"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}],
            "tool_search_tool_regex_20251119",
        ),
    ],
)
async def test_messages_deferral_to_a_chat_server_is_refused_in_anthropic_shape(
    translating_pod: TranslatingPod, tools: list[dict[str, Any]], named: str
) -> None:
    pod = translating_pod
    async with pod.anthropic("plain") as client:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(
                model=MODEL["chat"], max_tokens=64, messages=ASK, tools=tools
            )
    message = raised.value.body["error"]["message"]
    assert "provider 'local' speaks Chat Completions" in message
    assert named in message
    assert pod.sent("chat") == []


@pytest.mark.parametrize(
    ("tools", "named"),
    [
        (
            [{"type": "function", "name": "w", "parameters": SCHEMA, "defer_loading": True}],
            "defer_loading",
        ),
        ([{"type": "tool_search"}], "tool_search"),
    ],
)
async def test_responses_deferral_to_a_chat_server_is_refused_in_responses_shape(
    translating_pod: TranslatingPod, tools: list[dict[str, Any]], named: str
) -> None:
    pod = translating_pod
    async with pod.openai("plain") as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.responses.create(model=MODEL["chat"], input="hi", tools=tools)
    assert raised.value.body["code"] == "untranslatable_request"
    assert named in raised.value.body["message"]
    assert pod.sent("chat") == []


async def test_chat_deferral_to_a_messages_provider_is_refused_in_chat_shape(
    translating_pod: TranslatingPod,
) -> None:
    pod = translating_pod
    tool = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": SCHEMA},
        "defer_loading": True,
    }
    async with pod.openai("plain") as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(
                model=MODEL["messages"], messages=ASK, tools=[tool]
            )
    assert "defer_loading on the tool 'get_weather'" in raised.value.body["message"]
    assert pod.sent("messages") == []
