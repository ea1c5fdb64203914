"""A streamed request whose first target fails before answering falls back to a provider of
another protocol (contract §14 with §18): that provider's stream reaches the caller live, in
the caller's protocol, pass-through and mediated. And hidden rounds of a streamed, translated
conversation come back when it continues, and a retry after a broken stream resumes."""

from __future__ import annotations

import asyncio

from tests.support.upstream import Reply
from tests.translation.conftest import TranslatingPod
from tests.translation.streams import stream_reply, stream_through
from tests.translation.test_fallback_and_continuity import falling_back  # noqa: F401 (fixture)

TRADE = {"symbol": "AAPL", "side": "buy", "quantity": 1}
DEADLINE_S = 20  # a stream held whole would hang the test: it fails here instead


async def test_a_streamed_fallback_of_another_protocol_streams_live(
    falling_back: TranslatingPod,  # noqa: F811
) -> None:
    pod = falling_back
    gate = asyncio.Event()
    pod.script("messages", Reply.error("anthropic", 529, "busy", type="overloaded_error"))
    pod.script("chat", stream_reply("chat", ["AAPL ", "trades at 1."], hold_after_first_text=gate))
    try:
        got = await asyncio.wait_for(
            stream_through(pod, "messages", "plain", "claude-sonnet-4-6", gate.set), DEADLINE_S
        )
    finally:
        gate.set()
    assert got.error is None, got.error
    assert got.text == "AAPL trades at 1." and got.deltas[0] == "AAPL "
    (sent,) = pod.sent("chat")
    assert sent["model"] == "local-model" and sent["stream"] is True
    (record,) = pod.audit("plain")
    assert [a["provider"] for a in record["providers"]] == ["anthropic", "local"]


async def test_a_streamed_mediated_fallback_runs_the_tool_once(
    falling_back: TranslatingPod,  # noqa: F811
) -> None:
    """Anthropic streams the tool call, then fails; the Chat server's stream answers."""
    pod = falling_back
    pod.script(
        "messages",
        stream_reply("messages", [], [("toolu_1", "desk_quote", {"symbol": "AAPL"})]),
        Reply.error("anthropic", 503, "down", type="overloaded_error"),
    )
    pod.script("chat", stream_reply("chat", ["AAPL trades at 1."]))
    got = await asyncio.wait_for(
        stream_through(pod, "messages", "analyst", "claude-sonnet-4-6"), DEADLINE_S
    )
    assert got.error is None, got.error
    assert got.text == "AAPL trades at 1."
    assert [r.path for r in pod.service.requests] == ["/quotes/AAPL"]
    (sent,) = pod.sent("chat")
    assert sent["stream"] is True
    assert sent["messages"][-1]["role"] == "tool"


async def test_hidden_rounds_come_back_when_a_streamed_conversation_continues(
    translating_pod: TranslatingPod,
) -> None:
    """Claude Code streams every turn: against a Chat-only server its first answer came
    through a translated stream; its next turn reaches the server with the hidden call and
    result back in place, and the tool is not run again."""
    pod = translating_pod
    pod.script(
        "chat",
        stream_reply("chat", [], [("call_1", "desk_quote", {"symbol": "AAPL"})]),
        stream_reply("chat", ["AAPL trades ", "at 1."]),
        stream_reply("chat", ["Yes."]),
    )
    ask = [{"role": "user", "content": "What is AAPL at?"}]
    async with pod.anthropic("analyst") as client:
        async with client.messages.stream(model="local-model", max_tokens=99, messages=ask) as live:
            first = await live.get_final_message()
        again = [
            *ask,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "Is that up?"},
        ]
        async with client.messages.stream(
            model="local-model", max_tokens=99, messages=again
        ) as live:
            second = await live.get_final_message()
    assert [b.text for b in second.content if b.type == "text"] == ["Yes."]
    *_, third = pod.sent("chat")
    assert [m["role"] for m in third["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert third["messages"][1]["tool_calls"][0]["id"] == "call_1"
    assert [r.path for r in pod.service.requests] == ["/quotes/AAPL"]


async def test_a_retry_after_a_translated_stream_failed_mid_round_runs_the_tool_once(
    translating_pod: TranslatingPod,
) -> None:
    """The tool ran, then the provider's next stream broke: the caller's identical retry
    resumes the journaled round (SPEC §8.2) instead of running the tool again."""
    pod = translating_pod
    pod.script(
        "chat",
        stream_reply("chat", [], [("call_1", "desk_trade", TRADE)]),
        stream_reply("chat", ["Bought ", "one."], cut_after_first_text=True),
        stream_reply("chat", ["Bought ", "one."]),
    )
    failed = await stream_through(pod, "messages", "analyst", "local-model")
    assert failed.error is not None
    retried = await stream_through(pod, "messages", "analyst", "local-model")
    assert retried.error is None, retried.error
    assert retried.text == "Bought one."
    assert [r.path for r in pod.service.requests] == ["/trades"]  # once, across both attempts
    assert any(r.get("resumed_from") for r in pod.audit("analyst"))
