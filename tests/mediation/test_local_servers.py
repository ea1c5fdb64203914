"""OpenAI-compatible local servers (SPEC §7.4) and Anthropic's own error types (§7.2), through
a mediated pod driven by the real SDKs."""

from __future__ import annotations

import anthropic
import pytest

from tests.mediation.conftest import MediatedPod
from tests.mediation.scripted import an_calls, oa_calls, oa_text
from tests.support.upstream import Reply

ASK = [{"role": "user", "content": "What is AAPL at?"}]


def llama_cpp_reply() -> dict:
    """llama-cpp-python's shape: the tool call mirrored in the legacy ``function_call`` field
    (its name ending in ':' under ``tool_choice: auto``), and no content."""
    body = oa_calls(("call_1", "desk_quote", {"symbol": "AAPL"}))
    message = body["choices"][0]["message"]
    message["function_call"] = {"name": "desk_quote:", "arguments": '{"symbol": "AAPL"}'}
    return body


async def test_a_legacy_function_call_mirror_is_not_a_second_call(pod: MediatedPod) -> None:
    pod.upstream.enqueue("openai", Reply.json(llama_cpp_reply()), Reply.json(oa_text("At 1.")))
    client = pod.openai()
    answer = await client.chat.completions.create(model="gpt-4o", messages=ASK)
    assert answer.choices[0].message.content == "At 1."
    assert [r.path for r in pod.service.requests] == ["/quotes/AAPL"]
    hidden_turn = pod.sent("openai")[1]["messages"][1]
    assert hidden_turn["role"] == "assistant"
    assert [c["id"] for c in hidden_turn["tool_calls"]] == ["call_1"]


async def test_a_hidden_assistant_turn_that_said_nothing_carries_empty_content(
    pod: MediatedPod,
) -> None:
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("call_1", "desk_quote", {"symbol": "AAPL"}))),
        Reply.json(oa_text("At 1.")),
    )
    client = pod.openai()
    await client.chat.completions.create(model="gpt-4o", messages=ASK)
    hidden_turn = pod.sent("openai")[1]["messages"][1]
    assert hidden_turn["content"] == ""


async def test_only_the_legacy_field_still_makes_a_call(pod: MediatedPod) -> None:
    body = oa_text("")
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "desk_quote", "arguments": '{"symbol": "MSFT"}'},
    }
    pod.upstream.enqueue("openai", Reply.json(body), Reply.json(oa_text("At 2.")))
    answer = await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    assert answer.choices[0].message.content == "At 2."
    assert [r.path for r in pod.service.requests] == ["/quotes/MSFT"]


async def test_an_anthropic_body_error_uses_an_anthropic_type(pod: MediatedPod) -> None:
    pod.upstream.enqueue("anthropic", Reply.error("anthropic", 500, "the model broke"))
    client = pod.anthropic()
    with pytest.raises(anthropic.APIStatusError) as caught:
        await client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=ASK)
    assert caught.value.status_code == 502
    assert caught.value.body["error"]["type"] == "api_error"


async def test_an_anthropic_stream_error_event_uses_an_anthropic_type(pod: MediatedPod) -> None:
    pod.upstream.enqueue(
        "anthropic",
        Reply.json(an_calls(("toolu_1", "desk_quote", {"symbol": "AAPL"}))),
        Reply.error("anthropic", 503, "overloaded upstream"),
    )
    client = pod.anthropic()
    with pytest.raises(anthropic.APIStatusError) as caught:
        async with client.messages.stream(
            model="claude-sonnet-4-6", max_tokens=64, messages=ASK
        ) as stream:
            async for _ in stream:
                pass
    # The SDK raises the class of the event's type: an Anthropic type, never our own.
    assert caught.value.body["error"]["type"] == "api_error"
    assert caught.value.body["error"]["code"] == "upstream_error"
