"""Every recorded provider response, served by the stub upstream to a mediated agent, reaches
the SDK client with the same answer (its tools are the runner's here), streamed or not."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.mediation.conftest import MediatedPod
from tests.mediation.test_codecs import SUCCESSES, body_of, label, wire_calls
from tests.support.upstream import Recorded

ASK = [{"role": "user", "content": "go"}]


def openai_calls(message: Any) -> list[tuple[str, str, Any]]:
    if message.function_call is not None:
        return [
            (
                "call_legacy_0",
                message.function_call.name,
                orjson.loads(message.function_call.arguments),
            )
        ]
    return [
        (c.id, c.function.name, orjson.loads(c.function.arguments or "{}"))
        for c in message.tool_calls or []
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("exchange", SUCCESSES, ids=label)
async def test_recorded_answers_reach_the_client_intact(
    pod: MediatedPod, exchange: Recorded, stream: bool
) -> None:
    expected = body_of(exchange)
    pod.upstream.enqueue(exchange.api, exchange.reply())
    if exchange.api == "openai":
        client = pod.openai()
        if stream:
            async with client.chat.completions.stream(model="gpt-4o", messages=ASK) as events:
                async for _ in events:
                    pass
                completion = await events.get_final_completion()
        else:
            completion = await client.chat.completions.create(model="gpt-4o", messages=ASK)
        message = completion.choices[0].message
        assert openai_calls(message) == wire_calls("openai", expected)
        assert (message.content or None) == (
            expected["choices"][0]["message"].get("content") or None
        )
    else:
        client = pod.anthropic()
        arguments: dict[str, Any] = {
            "model": "claude-sonnet-4-6",
            "max_tokens": 64,
            "messages": ASK,
        }
        if stream:
            async with client.messages.stream(**arguments) as events:
                message = await events.get_final_message()
        else:
            message = await client.messages.create(**arguments)
        got = {"content": [b.model_dump(exclude_none=True) for b in message.content]}
        assert wire_calls("anthropic", got) == wire_calls("anthropic", expected)
        assert [b["type"] for b in got["content"]] == [b["type"] for b in expected["content"]]
        assert message.stop_reason == expected["stop_reason"]
    assert pod.service.requests == []
    assert pod.sent(exchange.api)[0]["stream"] is stream  # live streaming (SPEC §8.1)
