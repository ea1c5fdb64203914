"""The scripted demo model, spoken to by the real OpenAI SDK, streaming and not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
import pytest
from aiohttp import web

from tests.support.example_apps import example_app

QUOTE_TOOL = {
    "type": "function",
    "function": {
        "name": "trading-api_get_quote",
        "description": "Last traded price of one symbol.",
        "parameters": {
            "type": "object",
            "properties": {"symbol": {"type": "string"}},
            "required": ["symbol"],
        },
    },
}
CONTEXT_TOOL = {
    "type": "function",
    "function": {
        "name": "trading-api_get_market_context",
        "description": "Positions, balance and buying power for the calling agent.",
        "parameters": {"type": "object", "properties": {}},
    },
}
FUNDAMENTALS_TOOL = {
    "type": "function",
    "function": {
        "name": "research-mcp_get_fundamentals",
        "description": "Fundamentals of a company: sector, P/E ratio, market cap, revenue growth.",
        "parameters": {
            "type": "object",
            "properties": {"symbol": {"type": "string"}},
            "required": ["symbol"],
        },
    },
}
ORDER_TOOL = {
    "type": "function",
    "function": {
        "name": "trading-api_execute_trade",
        "description": "Place a market order.",
        "parameters": {
            "type": "object",
            "properties": {
                "symbol": {"type": "string"},
                "side": {"enum": ["buy", "sell"]},
                "quantity": {"type": "number"},
            },
            "required": ["symbol", "side", "quantity"],
        },
    },
}
QUESTION = [{"role": "user", "content": "What is NVDA trading at?"}]
SUMMARY = (
    "(scripted demo model) From your tools:\n- trading-api_get_quote: symbol NVDA, price 121.4"
)


@pytest.fixture
async def model() -> AsyncIterator[openai.AsyncOpenAI]:
    runner = web.AppRunner(example_app("demo-model").create_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


def answered_quote(call_id: str) -> list[dict[str, Any]]:
    result = {"ok": True, "status": 200, "data": {"symbol": "NVDA", "price": 121.4}}
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "trading-api_get_quote", "arguments": '{"symbol": "NVDA"}'},
    }
    return [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": orjson.dumps(result).decode()},
    ]


async def test_asked_about_a_symbol_it_calls_the_quote_tool(model: openai.AsyncOpenAI) -> None:
    reply = await model.chat.completions.create(
        model="gpt-4o-mini", messages=QUESTION, tools=[CONTEXT_TOOL, QUOTE_TOOL]
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.function.name == "trading-api_get_quote"
    assert orjson.loads(call.function.arguments) == {"symbol": "NVDA"}


async def test_a_question_its_tool_descriptions_mention_calls_the_no_argument_tool(
    model: openai.AsyncOpenAI,
) -> None:
    question = [{"role": "user", "content": "How much buying power do I have?"}]
    reply = await model.chat.completions.create(
        model="gpt-4o-mini", messages=question, tools=[QUOTE_TOOL, CONTEXT_TOOL]
    )
    [call] = reply.choices[0].message.tool_calls or []
    assert (call.function.name, call.function.arguments) == ("trading-api_get_market_context", "{}")


async def test_another_symbol_tool_is_called_when_the_question_names_what_it_gives(
    model: openai.AsyncOpenAI,
) -> None:
    tools = [QUOTE_TOOL, FUNDAMENTALS_TOOL]
    plain = await model.chat.completions.create(model="gpt-4o-mini", messages=QUESTION, tools=tools)
    assert [c.function.name for c in plain.choices[0].message.tool_calls or []] == [
        "trading-api_get_quote"
    ]
    question = [{"role": "user", "content": "What is NVDA at, and its fundamentals?"}]
    both = await model.chat.completions.create(model="gpt-4o-mini", messages=question, tools=tools)
    calls = both.choices[0].message.tool_calls or []
    assert [(c.function.name, orjson.loads(c.function.arguments)) for c in calls] == [
        ("trading-api_get_quote", {"symbol": "NVDA"}),
        ("research-mcp_get_fundamentals", {"symbol": "NVDA"}),
    ]


async def test_told_to_buy_it_places_the_order_and_quotes_nothing(
    model: openai.AsyncOpenAI,
) -> None:
    question = [{"role": "user", "content": "Buy 10 NVDA."}]
    reply = await model.chat.completions.create(
        model="gpt-4o-mini", messages=question, tools=[QUOTE_TOOL, ORDER_TOOL]
    )
    [call] = reply.choices[0].message.tool_calls or []
    assert call.function.name == "trading-api_execute_trade"
    assert orjson.loads(call.function.arguments) == {
        "symbol": "NVDA",
        "side": "buy",
        "quantity": 10,
    }


async def test_with_the_result_in_the_conversation_it_summarises_it(
    model: openai.AsyncOpenAI,
) -> None:
    reply = await model.chat.completions.create(
        model="gpt-4o-mini", messages=answered_quote("c1"), tools=[QUOTE_TOOL]
    )
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.content == (
        "(scripted demo model) From your tools:\n- trading-api_get_quote: symbol NVDA, price 121.4"
    )


async def test_without_tools_it_says_it_is_scripted(model: openai.AsyncOpenAI) -> None:
    reply = await model.chat.completions.create(model="gpt-4o-mini", messages=QUESTION)
    content = reply.choices[0].message.content or ""
    assert content.startswith("(scripted demo model)")


async def test_streamed_tool_call_and_answer_assemble_with_usage(
    model: openai.AsyncOpenAI,
) -> None:
    stream = await model.chat.completions.create(
        model="gpt-4o-mini",
        messages=QUESTION,
        tools=[QUOTE_TOOL],
        stream=True,
        stream_options={"include_usage": True},
    )
    names, arguments, finish, usage = [], "", None, None
    async for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for call in choice.delta.tool_calls or []:
                names += [call.function.name] if call.function and call.function.name else []
                arguments += (call.function.arguments or "") if call.function else ""
    assert (names, orjson.loads(arguments), finish) == (
        ["trading-api_get_quote"],
        {"symbol": "NVDA"},
        "tool_calls",
    )
    assert usage is not None and usage.total_tokens > 0

    stream = await model.chat.completions.create(
        model="gpt-4o-mini", messages=answered_quote("c1"), tools=[QUOTE_TOOL], stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == SUMMARY


async def test_a_body_without_messages_is_a_400_in_openai_shape(
    model: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await model.post("/chat/completions", body={"model": "x"}, cast_to=object)
    assert caught.value.body == {
        "message": "expected a JSON object with messages",
        "type": "invalid_request_error",
    }
