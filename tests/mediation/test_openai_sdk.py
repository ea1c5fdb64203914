"""Mediated OpenAI Chat Completions driven by the real openai SDK (sync and async)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from tests.mediation.conftest import TRADING_TOKEN, MediatedPod
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.upstream import Reply

MODEL = "gpt-4o"
ASK = [{"role": "user", "content": "What is AAPL at?"}]
LOCAL_TOOL = {
    "type": "function",
    "function": {
        "name": "notify_user",
        "description": "runner-side",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
}


def script(pod: MediatedPod, *bodies: dict[str, Any]) -> None:
    pod.upstream.enqueue("openai", *(Reply.json(b) for b in bodies))


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [orjson.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


async def test_sync_client_gets_the_answer_after_a_hidden_round(pod: MediatedPod) -> None:
    script(
        pod,
        oa_calls(("call_1", "desk_quote", {"symbol": "AAPL"}), tokens=100),
        oa_text("AAPL trades at 1.", tokens=150),
    )
    client = pod.openai(sync=True)
    completion = await asyncio.to_thread(client.chat.completions.create, model=MODEL, messages=ASK)
    assert completion.choices[0].message.content == "AAPL trades at 1."
    assert completion.choices[0].message.tool_calls is None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (250, 5)
    (tool_request,) = pod.service.requests
    assert tool_request.raw_path == "/quotes/AAPL"
    assert tool_request.headers["Authorization"] == f"Bearer {TRADING_TOKEN}"
    first, second = pod.sent("openai")
    assert first["stream"] is False
    assert [t["function"]["name"] for t in first["tools"]] == [
        "desk_quote",
        "desk_trade",
        "desk_slow",
    ]
    assert tool_results(second)[0]["ok"] is True
    assert tool_results(second)[0]["data"]["path"] == "/quotes/AAPL"
    for received in pod.upstream.requests_to("openai"):
        assert received.headers["Authorization"] == "Bearer sk-test-openai-key"
    (record,) = await pod.wait_for_audit(1)
    assert record["mode"] == "mediated" and record["outcome"] == {"status": "ok", "code": None}
    assert record["usage"] == {"input_tokens": 250, "output_tokens": 5, "rounds": 1}
    (call,) = record["tool_trace"][0]["calls"]
    assert (call["name"], call["presented"], call["status"]) == ("desk.quote", "desk_quote", 200)
    assert TRADING_TOKEN not in str(record)


async def test_async_stream_helper_with_usage(pod: MediatedPod) -> None:
    script(
        pod,
        oa_calls(
            ("call_1", "desk_quote", {"symbol": "AAPL"}),
            ("call_2", "desk_quote", {"symbol": "MSFT"}),
        ),
        oa_text("Both are up. " * 40),
    )
    client = pod.openai()
    async with client.chat.completions.stream(
        model=MODEL, messages=ASK, stream_options={"include_usage": True}
    ) as stream:
        deltas = [e.delta async for e in stream if e.type == "content.delta"]
        final = await stream.get_final_completion()
    assert "".join(deltas) == "Both are up. " * 40
    assert len(deltas) > 1
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is not None and final.usage.prompt_tokens == 20
    assert sorted(r.raw_path for r in pod.service.requests) == ["/quotes/AAPL", "/quotes/MSFT"]


async def test_sync_stream_helper(pod: MediatedPod) -> None:
    script(pod, oa_calls(("call_1", "desk_quote", {"symbol": "IBM"})), oa_text("IBM is flat."))
    client = pod.openai(sync=True)

    def consume() -> Any:
        with client.chat.completions.stream(model=MODEL, messages=ASK) as stream:
            for _ in stream:
                pass
            return stream.get_final_completion()

    final = await asyncio.to_thread(consume)
    assert final.choices[0].message.content == "IBM is flat."


async def test_runner_calls_are_restreamed_with_id_and_name_on_the_first_fragment(
    pod: MediatedPod,
) -> None:
    script(
        pod,
        oa_calls(("call_1", "desk_quote", {"symbol": "AAPL"})),
        oa_calls(("call_9", "notify_user", {"text": "AAPL is " + "up " * 200})),
    )
    client = pod.openai()
    stream = await client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[LOCAL_TOOL], stream=True
    )
    fragments = [
        fragment
        async for chunk in stream
        for choice in chunk.choices
        for fragment in choice.delta.tool_calls or []
    ]
    assert fragments[0].id == "call_9" and fragments[0].function.name == "notify_user"
    assert all(f.id is None and f.function.name is None for f in fragments[1:])
    arguments = "".join(f.function.arguments or "" for f in fragments)
    assert orjson.loads(arguments) == {"text": "AAPL is " + "up " * 200}
    first = pod.sent("openai")[0]
    assert first["tools"][0]["function"]["name"] == "notify_user"


async def test_non_streaming_runner_call_keeps_its_shape(pod: MediatedPod) -> None:
    script(pod, oa_calls(("call_9", "notify_user", {"text": "hi"}), content="Let me tell them."))
    client = pod.openai()
    completion = await client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[LOCAL_TOOL], parallel_tool_calls=False
    )
    message = completion.choices[0].message
    assert message.content == "Let me tell them."
    assert message.tool_calls[0].function.name == "notify_user"
    assert completion.choices[0].finish_reason == "tool_calls"
    assert pod.sent("openai")[0]["parallel_tool_calls"] is False
    assert pod.service.requests == []


async def test_legacy_functions_client(pod: MediatedPod) -> None:
    script(
        pod,
        oa_calls(("call_1", "desk_quote", {"symbol": "AAPL"})),
        oa_calls(("call_2", "notify_user", {"text": "done"})),
    )
    client = pod.openai()
    completion = await client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        functions=[LOCAL_TOOL["function"]],
        function_call="auto",
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "function_call"
    assert choice.message.function_call.name == "notify_user"
    first = pod.sent("openai")[0]
    assert "functions" not in first and first["tool_choice"] == "auto"


async def test_trade_goes_out_as_a_wrapped_json_body(pod: MediatedPod) -> None:
    trade = {"symbol": "AAPL", "side": "buy", "quantity": 3}
    script(pod, oa_calls(("call_1", "desk_trade", trade)), oa_text("Bought."))
    client = pod.openai()
    await client.chat.completions.create(model=MODEL, messages=ASK)
    (request,) = pod.service.requests
    assert (request.method, request.raw_path) == ("POST", "/trades")
    assert request.json() == {"trade": trade}
