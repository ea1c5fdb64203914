"""Continuity through runners' echo shapes (SPEC §8.3), with the real SDKs: the runner's ids
stand, text blocks joined without a separator are the same answer, and the managed tool behind
an answer never runs again."""

from __future__ import annotations

from typing import Any

import pytest

from tests.mediation.conftest import MediatedPod
from tests.mediation.scripted import an_calls, an_text, oa_calls, oa_text
from tests.support import responses as r
from tests.support.upstream import Reply

ASK = "Read the notes and quote AAPL."
QUOTE = {"symbol": "AAPL"}
READ = {"path": "notes.txt"}
RUNNER_TOOLS = {
    "openai": [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ],
    "anthropic": [
        {
            "name": "read_file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
    ],
}


def quotes(pod: MediatedPod) -> int:
    return sum(1 for request in pod.service.requests if request.path.startswith("/quotes"))


async def streamed_runner_call(pod: MediatedPod, api: str) -> None:
    """A streamed request: a hidden quote round, then an answer calling the runner's tool."""
    if api == "openai":
        pod.upstream.enqueue(
            api,
            Reply.json(oa_calls(("call_q_1", "desk_quote", QUOTE))),
            Reply.json(oa_calls(("call_abc_1", "read_file", READ))),
        )
        stream = await pod.openai().chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": ASK}],
            tools=RUNNER_TOOLS[api],
            stream=True,
        )
        async for _ in stream:
            pass
    else:
        pod.upstream.enqueue(
            api,
            Reply.json(an_calls(("toolu_q_1", "desk_quote", QUOTE))),
            Reply.json(an_calls(("toolu_abc_1", "read_file", READ))),
        )
        stream = await pod.anthropic().messages.create(
            model="claude-haiku-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": ASK}],
            tools=RUNNER_TOOLS[api],
            stream=True,
        )
        async for _ in stream:
            pass


def rewritten_echo(api: str) -> list[dict[str, Any]]:
    """OpenClaw's next request: the runner call under an id with its punctuation stripped."""
    if api == "openai":
        call = {"id": "callabc1", "type": "function", "function": {"name": "read_file"}}
        call["function"]["arguments"] = '{"path": "notes.txt"}'
        return [
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "callabc1", "content": "buy when cheap"},
        ]
    use = {"type": "tool_use", "id": "toolu_abc1", "name": "read_file", "input": READ}
    result = {"type": "tool_result", "tool_use_id": "toolu_abc1", "content": "buy when cheap"}
    return [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
    ]


def call_and_result_ids(api: str, messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(id of each runner call, id its result answers) in the body sent upstream."""
    if api == "openai":
        calls = [c["id"] for m in messages for c in m.get("tool_calls") or []]
        results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    else:
        blocks = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
        calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
    return list(zip(calls, results, strict=True))


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_runner_that_rewrites_ids_after_a_streamed_answer_keeps_them(
    pod: MediatedPod, api: str
) -> None:
    """The stored answer used to replace the runner's echo with the original ids: the tool
    result then answered no call, and providers refuse that (400) on every OpenClaw chain."""
    await streamed_runner_call(pod, api)
    pod.upstream.enqueue(api, Reply.json(oa_text("Done.") if api == "openai" else an_text("Done.")))
    if api == "openai":
        await pod.openai().chat.completions.create(
            model="gpt-4o", messages=rewritten_echo(api), tools=RUNNER_TOOLS[api]
        )
    else:
        await pod.anthropic().messages.create(
            model="claude-haiku-4-5",
            max_tokens=64,
            messages=rewritten_echo(api),
            tools=RUNNER_TOOLS[api],
        )
    sent = pod.sent(api)[-1]["messages"]
    pairs = call_and_result_ids(api, sent)
    assert all(call == result for call, result in pairs), pairs
    # The hidden quote round came back (its own ids), and the quote ran once.
    assert pairs[0][0] in ("call_q_1", "toolu_q_1")
    assert quotes(pod) == 1


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_text_blocks_joined_without_a_separator_are_the_same_answer(
    pod: MediatedPod, api: str
) -> None:
    """litellm joins a streamed answer's text blocks with nothing between them; the fingerprint
    joined them with a space, so the hidden round was lost and the quote ran again."""
    if api == "openai":
        pod.upstream.enqueue(
            api,
            Reply.json(oa_calls(("call_q_1", "desk_quote", QUOTE), content="Let me check.")),
            Reply.json(oa_text("AAPL is 1.")),
            Reply.json(oa_text("Ok.")),
        )
        stream = await pod.openai().chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": ASK}], stream=True
        )
        async for _ in stream:
            pass
    else:
        pod.upstream.enqueue(
            api,
            Reply.json(an_calls(("toolu_q_1", "desk_quote", QUOTE), text="Let me check.")),
            Reply.json(an_text("AAPL is 1.")),
            Reply.json(an_text("Ok.")),
        )
        stream = await pod.anthropic().messages.create(
            model="claude-haiku-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": ASK}],
            stream=True,
        )
        async for _ in stream:
            pass
    messages = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": "Let me check.AAPL is 1."},
        {"role": "user", "content": "Thanks."},
    ]
    if api == "openai":
        await pod.openai().chat.completions.create(model="gpt-4o", messages=messages)
    else:
        await pod.anthropic().messages.create(
            model="claude-haiku-4-5", max_tokens=64, messages=messages
        )
    sent = pod.sent(api)[-1]["messages"]
    assert [i for i, _ in call_and_result_ids(api, sent)] == [
        "call_q_1" if api == "openai" else "toolu_q_1"
    ]
    assert quotes(pod) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_an_answer_echoed_by_item_reference_gets_its_hidden_round(
    pod: MediatedPod, stream: bool
) -> None:
    """The Vercel AI SDK's default ``openai()`` sends an earlier answer back as an
    ``item_reference`` (its id only): its hidden round is found by the recorded item id."""
    pod.upstream.enqueue(
        "responses",
        r.reply(r.response(r.call("call_q_1", "desk_quote", QUOTE))),
        r.reply(r.response(r.message("AAPL is 1.", item_id="msg_final"), response_id="resp_2")),
        r.reply(r.response(r.message("Still 1."), response_id="resp_3")),
    )
    client = pod.openai()
    first = await client.responses.create(model="gpt-4o", input=ASK, stream=stream)
    if stream:
        async for _ in first:
            pass
    follow_up = [
        {"role": "user", "content": ASK},
        {"type": "item_reference", "id": "msg_final"},
        {"role": "user", "content": "And now?"},
    ]
    await client.responses.create(model="gpt-4o", input=follow_up)
    sent = pod.sent("responses")[-1]["input"]
    kinds = [item.get("type", "message") for item in sent]
    assert kinds[1:3] == ["function_call", "function_call_output"], kinds
    assert sent[1]["call_id"] == "call_q_1"
    assert quotes(pod) == 1
