"""Live streaming through tool rounds (SPEC §8.1), driven by the real SDKs' streaming helpers.

Each scripted upstream turn sends a text delta, then waits on an event that the test sets only
once the client has seen that delta: a sidecar that buffered a turn would never let the
upstream finish it (the guard below then fails the test instead of hanging). No timings.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from tests.mediation.conftest import MediatedPod
from tests.support import responses as r
from tests.support.upstream import Reply

ASK = "What is AAPL at?"
QUOTE_ARGS = '{"symbol": "AAPL"}'
# A sidecar that waits for a whole turn blocks on the gated upstream: fail, do not hang.
GUARD_S = 30


def chat_chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "chatcmpl-live", "object": "chat.completion.chunk", "created": 1}
    chunk |= {"model": "gpt-4o", "choices": [choice], **extra}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def chat_turns(first_gate: asyncio.Event, second_gate: asyncio.Event) -> list[Reply]:
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    call = {"index": 0, "id": "call_1", "type": "function"}
    first = [
        chat_chunk({"role": "assistant", "content": "Checking. "}),
        first_gate,
        chat_chunk({"tool_calls": [{**call, "function": {"name": "desk_quote", "arguments": ""}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": QUOTE_ARGS}}]}),
        chat_chunk({}, "tool_calls"),
        b'data: {"id":"chatcmpl-live","choices":[],"usage":' + orjson.dumps(usage) + b"}\n\n",
        b"data: [DONE]\n\n",
    ]
    second = [
        chat_chunk({"role": "assistant", "content": "AAPL is "}),
        second_gate,
        chat_chunk({"content": "42."}),
        chat_chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]
    return [Reply.sse(first), Reply.sse(second)]


def anthropic_event(payload: dict[str, Any]) -> bytes:
    return b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def anthropic_turn(
    message_id: str, text: str, gate: asyncio.Event, rest: str, tool: bool
) -> list[Any]:
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
    }
    message |= {"content": [], "stop_reason": None, "stop_sequence": None}
    message["usage"] = {"input_tokens": 10, "output_tokens": 1}
    events: list[Any] = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        gate,
    ]
    if rest:
        delta = {"type": "text_delta", "text": rest}
        events.append({"type": "content_block_delta", "index": 0, "delta": delta})
    events.append({"type": "content_block_stop", "index": 0})
    if tool:
        block = {"type": "tool_use", "id": "toolu_1", "name": "desk_quote", "input": {}}
        events.append({"type": "content_block_start", "index": 1, "content_block": block})
        # Escaped quotes split across deltas, as the recorded Sonnet stream sends them.
        for piece in ('{"symbol": "AA', 'PL"}'):
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append({"type": "content_block_delta", "index": 1, "delta": delta})
        events.append({"type": "content_block_stop", "index": 1})
    stop = {"stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None}
    events.append({"type": "message_delta", "delta": stop, "usage": {"output_tokens": 5}})
    events.append({"type": "message_stop"})
    return [e if isinstance(e, asyncio.Event) else anthropic_event(e) for e in events]


def responses_turn(body: dict[str, Any], gate: asyncio.Event) -> Reply:
    frames: list[Any] = []
    for kind, payload in r.sse_events(body):
        frames.append(b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n")
        if kind == "response.output_text.delta" and gate not in frames:
            frames.append(gate)
    return Reply.sse(frames)


class Gates:
    """Opens each upstream gate once the client saw text while it was still closed."""

    def __init__(self) -> None:
        self.first, self.second = asyncio.Event(), asyncio.Event()
        self.seen_while_waiting: list[str] = []

    def saw(self, text: str) -> None:
        final_turn = text.startswith("AAPL")
        gate = self.second if final_turn else self.first
        if not gate.is_set():
            self.seen_while_waiting.append(text)
            gate.set()


async def test_chat_completions_text_of_every_turn_arrives_live(pod: MediatedPod) -> None:
    gates = Gates()
    pod.upstream.enqueue("openai", *chat_turns(gates.first, gates.second))
    client = pod.openai()
    async with asyncio.timeout(GUARD_S):
        async with client.chat.completions.stream(
            model="gpt-4o",
            messages=[{"role": "user", "content": ASK}],
            stream_options={"include_usage": True},
        ) as stream:
            async for event in stream:
                if event.type == "content.delta" and event.delta:
                    gates.saw(event.delta)
            completion = await stream.get_final_completion()
    assert gates.seen_while_waiting == ["Checking. ", "AAPL is "]
    assert completion.choices[0].message.content == "Checking. AAPL is 42."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens == 10
    assert [req.path for req in pod.service.requests] == ["/quotes/AAPL"]
    first, second = pod.sent("openai")
    assert first["stream"] is True and second["stream"] is True
    assert second["messages"][1]["content"] == "Checking. "  # the hidden turn, exactly
    assert second["messages"][2]["role"] == "tool"


async def test_messages_text_of_every_turn_arrives_live_in_one_lifecycle(
    pod: MediatedPod,
) -> None:
    gates = Gates()
    pod.upstream.enqueue(
        "anthropic",
        Reply.sse(anthropic_turn("msg_1", "Checking. ", gates.first, "", tool=True)),
        Reply.sse(anthropic_turn("msg_2", "AAPL is ", gates.second, "42.", tool=False)),
    )
    client = pod.anthropic()
    kinds: list[str] = []
    async with asyncio.timeout(GUARD_S):
        async with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=256, messages=[{"role": "user", "content": ASK}]
        ) as stream:
            async for event in stream:
                kinds.append(event.type)
                if event.type == "text":
                    gates.saw(event.text)
            message = await stream.get_final_message()
    assert gates.seen_while_waiting == ["Checking. ", "AAPL is "]
    assert kinds.count("message_start") == 1 and kinds.count("message_stop") == 1
    assert [b.text for b in message.content] == ["Checking. ", "AAPL is 42."]
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (20, 10)
    assert [req.path for req in pod.service.requests] == ["/quotes/AAPL"]
    second = pod.sent("anthropic")[1]
    assert second["stream"] is True
    assert second["messages"][1]["content"][1]["input"] == {"symbol": "AAPL"}


async def test_responses_text_of_every_turn_arrives_live_in_one_lifecycle(
    pod: MediatedPod,
) -> None:
    gates = Gates()
    first = r.response(
        r.message("Checking. ", item_id="msg_a"),
        r.call("call_1", "desk_quote", {"symbol": "AAPL"}),
        response_id="resp_1",
    )
    final = r.response(r.message("AAPL is 42.", item_id="msg_b"), response_id="resp_2")
    pod.upstream.enqueue(
        "responses", responses_turn(first, gates.first), responses_turn(final, gates.second)
    )
    client = pod.openai()
    numbers: list[int] = []
    kinds: list[str] = []
    async with asyncio.timeout(GUARD_S):
        async with client.responses.stream(model="gpt-4o", input=ASK) as stream:
            async for event in stream:
                numbers.append(event.sequence_number)
                kinds.append(event.type)
                if event.type == "response.output_text.delta":
                    gates.saw(event.delta)
            answer = await stream.get_final_response()
    assert gates.seen_while_waiting == ["Check", "AAPL "]
    assert numbers == list(range(len(numbers)))
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.count("response.created") == 1 and kinds.count("response.completed") == 1
    assert answer.output_text == "Checking. AAPL is 42."
    assert [i.id for i in answer.output] == ["msg_a", "msg_b"]
    assert answer.id == "resp_1"  # one identity per lifecycle (the SDK checks it)
    assert answer.usage is not None and answer.usage.input_tokens == 20
    assert [req.path for req in pod.service.requests] == ["/quotes/AAPL"]
    assert all(
        body["stream"] is True for body in (x.json for x in pod.upstream.requests_to("responses"))
    )


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_the_next_request_restores_the_hidden_round_without_repeating_text(
    pod: MediatedPod, api: str
) -> None:
    gates = Gates()
    gates.first.set(), gates.second.set()
    if api == "openai":
        pod.upstream.enqueue("openai", *chat_turns(gates.first, gates.second))
        client = pod.openai()
        async with client.chat.completions.stream(
            model="gpt-4o", messages=[{"role": "user", "content": ASK}]
        ) as stream:
            seen = (await stream.get_final_completion()).choices[0].message.content
        echoed: Any = seen
    else:
        pod.upstream.enqueue(
            "anthropic",
            Reply.sse(anthropic_turn("msg_1", "Checking. ", gates.first, "", tool=True)),
            Reply.sse(anthropic_turn("msg_2", "AAPL is ", gates.second, "42.", tool=False)),
        )
        client = pod.anthropic()
        async with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=256, messages=[{"role": "user", "content": ASK}]
        ) as stream:
            message = await stream.get_final_message()
        echoed = [{"type": "text", "text": b.text} for b in message.content]
    history = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": echoed},
        {"role": "user", "content": "And MSFT?"},
    ]
    if api == "openai":
        pod.upstream.enqueue(
            "openai", Reply.sse([chat_chunk({"content": "Fine."}, "stop"), b"data: [DONE]\n\n"])
        )
        await pod.openai().chat.completions.create(model="gpt-4o", messages=history)
    else:
        pod.upstream.enqueue(
            "anthropic",
            Reply.sse(
                anthropic_turn("msg_3", "Fine.", asyncio.Event(), "", tool=False)[:2]
                + anthropic_turn("msg_3", "Fine.", gates.first, "", tool=False)[3:]
            ),
        )
        await pod.anthropic().messages.create(
            model="claude-sonnet-4-5", max_tokens=64, messages=history
        )
    restored = pod.sent(api)[2]["messages"]
    texts = orjson.dumps(restored).decode()
    assert texts.count("Checking. ") == 1 and texts.count("AAPL is 42.") == 1
    assert [m["role"] for m in restored] == [
        "user",
        "assistant",
        _results_role(api),
        "assistant",
        "user",
    ]
    first_round = pod.sent(api)[1]["messages"]
    assert restored[1:3] == first_round[1:3]  # the hidden round, exactly as it went upstream


def _results_role(api: str) -> str:
    return "tool" if api == "openai" else "user"
