"""Mediated Anthropic Messages driven by the real anthropic SDK (sync and async)."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import orjson
import pytest

from tests.mediation.conftest import MediatedPod
from tests.mediation.scripted import an_calls, an_text
from tests.support.upstream import Reply

MODEL = "claude-sonnet-4-6"
ASK = [{"role": "user", "content": "What is AAPL at?"}]
LOCAL_TOOL = {
    "name": "notify_user",
    "description": "runner-side",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
}
THINKING = {"type": "thinking", "thinking": "I should look it up.", "signature": "c2lnbmF0dXJl"}


def script(pod: MediatedPod, *bodies: dict[str, Any]) -> None:
    pod.upstream.enqueue("anthropic", *(Reply.json(b) for b in bodies))


async def test_sync_client_gets_the_answer_after_a_hidden_round(pod: MediatedPod) -> None:
    script(
        pod,
        an_calls(("toolu_1", "desk_quote", {"symbol": "AAPL"}), text="Looking.", tokens=100),
        an_text("AAPL trades at 1.", tokens=120),
    )
    client = pod.anthropic(sync=True)
    message = await asyncio.to_thread(
        client.messages.create, model=MODEL, max_tokens=512, messages=ASK
    )
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "AAPL trades at 1."
    assert (message.usage.input_tokens, message.usage.output_tokens) == (220, 5)
    first, second = pod.sent("anthropic")
    assert [t["name"] for t in first["tools"]] == ["desk_quote", "desk_trade", "desk_slow"]
    assert first["tools"][0]["input_schema"]["required"] == ["symbol"]
    (results,) = [m for m in second["messages"][2:]]
    (block,) = results["content"]
    assert block["tool_use_id"] == "toolu_1" and block["is_error"] is False
    assert orjson.loads(block["content"])["data"]["path"] == "/quotes/AAPL"
    for received in pod.upstream.requests_to("anthropic"):
        assert received.headers["x-api-key"] == "sk-ant-test-key"


async def test_async_stream_helper_with_thinking_and_unknown_blocks(pod: MediatedPod) -> None:
    server_use = {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"query": "AAPL"},
    }
    server_result = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://example.com",
                "title": "t",
                "encrypted_content": "x",
            }
        ],
    }
    first = an_calls(("toolu_1", "desk_quote", {"symbol": "AAPL"}))
    first["content"] = [THINKING, *first["content"]]
    final = an_text("AAPL is up " * 60)
    final["content"] = [THINKING, server_use, server_result, *final["content"]]
    script(pod, first, final)
    client = pod.anthropic()
    async with client.messages.stream(model=MODEL, max_tokens=512, messages=ASK) as stream:
        texts = [t async for t in stream.text_stream]
        message = await stream.get_final_message()
    assert "".join(texts) == "AAPL is up " * 60
    dumped = [b.model_dump(exclude_none=True) for b in message.content]
    assert dumped[0] == THINKING
    assert dumped[1] == server_use
    assert dumped[2]["type"] == "web_search_tool_result"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 20
    # The thinking block went back upstream untouched in the hidden assistant turn.
    assert pod.sent("anthropic")[1]["messages"][1]["content"][0] == THINKING


async def test_sync_stream_helper(pod: MediatedPod) -> None:
    script(pod, an_calls(("toolu_1", "desk_quote", {"symbol": "IBM"})), an_text("IBM is flat."))
    client = pod.anthropic(sync=True)

    def consume() -> Any:
        with client.messages.stream(model=MODEL, max_tokens=256, messages=ASK) as stream:
            text = "".join(stream.text_stream)
            return text, stream.get_final_message()

    text, message = await asyncio.to_thread(consume)
    assert text == "IBM is flat."
    assert message.content[0].text == "IBM is flat."


async def test_runner_tool_use_is_restreamed_as_input_json(pod: MediatedPod) -> None:
    script(
        pod,
        an_calls(("toolu_1", "desk_quote", {"symbol": "AAPL"})),
        an_calls(("toolu_9", "notify_user", {"text": "AAPL " * 100}), text="Telling them."),
    )
    client = pod.anthropic()
    stream = await client.messages.create(
        model=MODEL, max_tokens=256, messages=ASK, tools=[LOCAL_TOOL], stream=True
    )
    events = [event async for event in stream]
    assert events[0].type == "message_start"
    assert events[-1].type == "message_stop"
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert [(b.type, getattr(b, "name", None)) for b in starts] == [
        ("text", None),
        ("tool_use", "notify_user"),
    ]
    partial = "".join(
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    assert orjson.loads(partial) == {"text": "AAPL " * 100}
    (delta,) = [e for e in events if e.type == "message_delta"]
    assert delta.delta.stop_reason == "tool_use"


async def test_choice_naming_a_managed_tool_is_presented_then_relaxed(pod: MediatedPod) -> None:
    script(pod, an_calls(("toolu_1", "desk_quote", {"symbol": "A"})), an_text("ok"))
    client = pod.anthropic()
    await client.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=ASK,
        tool_choice={"type": "tool", "name": "desk.quote", "disable_parallel_tool_use": True},
    )
    first, second = pod.sent("anthropic")
    assert first["tool_choice"] == {
        "type": "tool",
        "name": "desk_quote",
        "disable_parallel_tool_use": True,
    }
    assert second["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


async def test_mixed_response_is_refused_in_anthropic_shape(pod: MediatedPod) -> None:
    script(
        pod, an_calls(("toolu_1", "desk_quote", {"symbol": "A"}), ("toolu_2", "notify_user", {}))
    )
    client = pod.anthropic()
    with pytest.raises(anthropic.APIStatusError) as caught:
        await client.messages.create(model=MODEL, max_tokens=64, messages=ASK, tools=[LOCAL_TOOL])
    assert caught.value.status_code == 502
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["code"] == "mixed_executor_response"
    assert "toolu_2" in caught.value.body["error"]["message"]
    assert pod.service.requests == []
    (record,) = await pod.wait_for_audit(1)
    assert record["outcome"]["code"] == "mixed_executor_response"
    assert [c["executed"] for c in record["tool_trace"][0]["calls"]] == [False, False]


async def test_invalid_input_is_corrected_by_the_model(pod: MediatedPod) -> None:
    script(
        pod,
        an_calls(("toolu_1", "desk_trade", {"symbol": "AAPL", "side": "short", "quantity": 1})),
        an_calls(("toolu_2", "desk_trade", {"symbol": "AAPL", "side": "sell", "quantity": 1})),
        an_text("Sold one."),
    )
    message = await pod.anthropic().messages.create(model=MODEL, max_tokens=64, messages=ASK)
    assert message.content[0].text == "Sold one."
    (trade,) = pod.service.requests
    assert trade.json() == {"trade": {"symbol": "AAPL", "side": "sell", "quantity": 1}}
    correction = pod.sent("anthropic")[1]["messages"][-1]["content"][0]
    assert correction["is_error"] is True
    assert orjson.loads(correction["content"])["error"]["code"] == "invalid_arguments"


async def test_every_hidden_round_carries_the_clients_anthropic_headers(pod: MediatedPod) -> None:
    script(
        pod,
        an_calls(("toolu_1", "desk_quote", {"symbol": "AAPL"})),
        an_text("AAPL trades at 1."),
    )
    client = pod.anthropic(default_headers={"anthropic-beta": "tools-2024-04-04"})
    await client.messages.create(model=MODEL, max_tokens=512, messages=ASK)
    rounds = pod.upstream.requests_to("anthropic")
    assert len(rounds) == 2
    for received in rounds:
        assert received.headers["anthropic-beta"] == "tools-2024-04-04"
        assert received.headers["anthropic-version"] == client.default_headers["anthropic-version"]
        assert pod.tokens["analyst"] not in str(dict(received.headers))
