"""Streamed requests to a provider of another protocol, end to end (contract §18): the real
SDKs stream from the sidecar, a local upstream streams in its own protocol, and the answer
arrives live, event by event, in the caller's protocol: plain pass-through, a mediated tool
round (the sidecar tool executed once), a runner tool handed back in the stream, and an
upstream that fails mid-stream. Every one of the six directions."""

from __future__ import annotations

import asyncio

import pytest

from tests.translation.conftest import DIRECTIONS, MODEL, ROUTE, TranslatingPod
from tests.translation.streams import stream_reply, stream_through

pytestmark = pytest.mark.parametrize(("caller", "target"), DIRECTIONS)
TEXTS = ["AAPL ", "trades ", "at 1."]
STOPS = {"chat": "stop", "messages": "end_turn", "responses": "completed"}
CALL_STOPS = {"chat": "tool_calls", "messages": "tool_use", "responses": "completed"}
# A test that waits on the stream fails here instead of hanging (not a timing assertion).
DEADLINE_S = 20


async def test_streamed_pass_through_arrives_live(
    translating_pod: TranslatingPod, caller: str, target: str
) -> None:
    pod = translating_pod
    gate = asyncio.Event()  # the upstream holds the rest until the first text reached the caller
    pod.script(target, stream_reply(target, TEXTS, hold_after_first_text=gate))
    try:
        got = await asyncio.wait_for(
            stream_through(pod, caller, "plain", MODEL[target], gate.set), DEADLINE_S
        )
    finally:
        gate.set()  # a stream held whole by the sidecar must not hold the upstream past it
    assert got.error is None, got.error
    assert got.deltas[0] == "AAPL " and "".join(got.deltas) == "AAPL trades at 1."
    assert got.text == "AAPL trades at 1."
    assert got.stop == STOPS[caller]
    assert got.input_tokens == 40
    (sent,) = pod.sent(target)
    assert sent["stream"] is True
    if target == "chat" and caller != "chat":  # a Chat-only server reads max_tokens
        assert "max_completion_tokens" not in sent
        assert caller == "responses" or sent["max_tokens"] == 256
    (record,) = pod.audit("plain")
    assert record["outcome"] == {"status": "ok", "code": None}
    assert record["translation"]["to"] == [target]
    # Charged as the provider counted it (its usage chunk was asked for, and read as it passed).
    assert (record["usage"]["input_tokens"], record["usage"]["output_tokens"]) == (40, 3)


async def test_streamed_tool_round_mediated_runs_the_tool_once(
    translating_pod: TranslatingPod, caller: str, target: str
) -> None:
    pod = translating_pod
    gate = asyncio.Event()
    pod.script(
        target,
        stream_reply(target, [], [("call_1", "desk_quote", {"symbol": "AAPL"})]),
        stream_reply(target, TEXTS, hold_after_first_text=gate),
    )
    try:
        got = await asyncio.wait_for(
            stream_through(pod, caller, "analyst", MODEL[target], gate.set), DEADLINE_S
        )
    finally:
        gate.set()
    assert got.error is None, got.error
    assert got.text == "AAPL trades at 1." and got.calls == []
    assert [r.path for r in pod.service.requests] == ["/quotes/AAPL"]  # exactly once
    first, second = pod.sent(target)
    assert first["stream"] is True and second["stream"] is True
    assert "/quotes/AAPL" in str(second)  # the tool's result went back up, translated


async def test_mediated_stream_is_charged_as_the_provider_counted(
    translating_pod: TranslatingPod, caller: str, target: str
) -> None:
    """Each translated call of a mediated round is charged the usage its provider's stream
    told, also for a Chat caller that did not ask for its usage chunk (#43: its turn was the
    caller's stream parsed back, which carries usage only when the caller asked for it)."""
    pod = translating_pod
    pod.script(
        target,
        stream_reply(target, [], [("call_1", "desk_quote", {"symbol": "AAPL"})], tokens=40),
        stream_reply(target, TEXTS, tokens=50),
    )
    got = await asyncio.wait_for(
        stream_through(pod, caller, "analyst", MODEL[target], chat_usage=False), DEADLINE_S
    )
    assert got.error is None, got.error
    (record,) = pod.audit("analyst")
    assert "estimated" not in record["usage"], record["usage"]
    assert (record["usage"]["input_tokens"], record["usage"]["output_tokens"]) == (90, 6)


async def test_runner_tool_comes_back_in_the_stream(
    translating_pod: TranslatingPod, caller: str, target: str
) -> None:
    from tests.translation.test_sdk_end_to_end import runner_tools

    pod = translating_pod
    pod.script(target, stream_reply(target, [], [("call_7", "notify_user", {"text": "hi"})]))
    got = await asyncio.wait_for(
        stream_through(pod, caller, "analyst", MODEL[target], tools=runner_tools(caller)),
        DEADLINE_S,
    )
    assert got.error is None, got.error
    assert got.calls == [("call_7", "notify_user", {"text": "hi"})]
    assert got.stop == CALL_STOPS[caller]
    assert pod.service.requests == []


async def test_upstream_failure_mid_stream_ends_the_callers_stream(
    translating_pod: TranslatingPod, caller: str, target: str
) -> None:
    pod = translating_pod
    pod.script(target, stream_reply(target, TEXTS, cut_after_first_text=True))
    got = await asyncio.wait_for(stream_through(pod, caller, "plain", MODEL[target]), DEADLINE_S)
    assert got.deltas == ["AAPL "]  # what arrived before the failure was shown
    assert got.error is not None  # and the caller's SDK was told the answer failed
    (record,) = pod.audit("plain")
    assert record["outcome"]["code"] in ("upstream_unreachable", "upstream_protocol_error")
    assert len(pod.upstream.requests_to(ROUTE[target])) == 1
