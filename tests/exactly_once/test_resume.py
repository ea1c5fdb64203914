"""Resuming a failed mediated request (SPEC §8.2): an identical retry reuses the journaled turns
and answers; a destructive call runs once, whatever the client does."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest

from clawpod.sidecar.model.canonical import canonical_json, digest
from clawpod.sidecar.state import journal_log
from tests.mediation.conftest import MediatedPod, PodFactory
from tests.mediation.scripted import an_calls, an_text, oa_calls, oa_text
from tests.support.upstream import Reply

ASK = [{"role": "user", "content": "Buy one AAPL."}]
BUY = {"symbol": "AAPL", "side": "buy", "quantity": 1}
SELL = {"symbol": "MSFT", "side": "sell", "quantity": 2}


def trades(pod: MediatedPod) -> list[Any]:
    return [r for r in pod.service.requests if r.path == "/trades"]


async def post_openai(
    pod: MediatedPod, body: dict[str, Any], agent: str = "analyst"
) -> tuple[int, dict[str, Any]]:
    """A client that sends the same request again on a failure status, whatever the headers."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            pod.sidecar.openai_base_url + "/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {pod.tokens[agent]}"},
        ) as response,
    ):
        return response.status, await response.json()


def expected_key(pod: str, tool: str, request: str, call_id: str, arguments: dict[str, Any]) -> str:
    """``request``: the first attempt of the request (its resumed attempts share it)."""
    text = canonical_json(arguments).decode()
    return '"' + digest(pod, "analyst", tool, request, call_id, text) + '"'


async def test_a_retry_after_a_provider_failure_resumes_without_running_the_trade_again(
    pod: MediatedPod,
) -> None:
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.error("openai", 500, "provider trouble"),
        Reply.json(oa_calls(("t2", "desk_trade", SELL))),
        Reply.json(oa_text("Bought AAPL, sold MSFT.")),
    )
    body = {"model": "gpt-4o", "messages": ASK}
    status, _ = await post_openai(pod, body)
    assert status == 502
    status, second = await post_openai(pod, body)
    assert status == 200, second
    assert second["choices"][0]["message"]["content"] == "Bought AAPL, sold MSFT."
    # Usage counts the two model calls this attempt made, not the replayed one.
    assert second["usage"]["prompt_tokens"] == 20
    # t1 ran once; the retry's first model call was the journaled turn, not a new one.
    assert [t.json()["trade"] for t in trades(pod)] == [BUY, SELL]
    sent = pod.sent("openai")
    assert len(sent) == 4
    assert sent[2]["messages"][-1]["tool_call_id"] == "t1"
    assert orjson.loads(sent[2]["messages"][-1]["content"])["ok"] is True
    records = await pod.wait_for_audit(2)
    assert records[1]["resumed_from"] == records[0]["id"]
    assert "resumed_from" not in records[0]
    # Every request for a destructive tool carries the call's stable Idempotency-Key, the
    # resumed attempt's calls included.
    first = records[0]["id"]
    assert trades(pod)[0].headers["Idempotency-Key"] == expected_key(
        "test-pod", "desk.trade", first, "t1", BUY
    )
    assert trades(pod)[1].headers["Idempotency-Key"] == expected_key(
        "test-pod", "desk.trade", first, "t2", SELL
    )


async def test_read_only_calls_carry_no_idempotency_key(pod: MediatedPod) -> None:
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("q1", "desk_quote", {"symbol": "AAPL"}))),
        Reply.json(oa_text("AAPL is 1.")),
    )
    await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    assert "Idempotency-Key" not in pod.service.requests[0].headers


async def test_the_anthropic_sdk_retrying_by_hand_resumes(pod: MediatedPod) -> None:
    pod.upstream.enqueue(
        "anthropic",
        Reply.json(an_calls(("t1", "desk_trade", BUY))),
        Reply.error("anthropic", 529, "overloaded", "overloaded_error"),
        Reply.json(an_text("Bought.")),
    )
    client = pod.anthropic()
    ask = {"model": "claude-haiku-4-5", "max_tokens": 64, "messages": ASK}
    with pytest.raises(anthropic.APIStatusError):
        await client.messages.create(**ask)
    message = await client.messages.create(**ask)
    assert message.content[0].text == "Bought."
    assert len(trades(pod)) == 1
    sent = pod.sent("anthropic")
    assert len(sent) == 3
    # The retry went on from the journaled round: its model call carries t1's result.
    assert sent[2]["messages"][-1]["content"][0]["tool_use_id"] == "t1"


async def test_a_successful_attempt_is_never_replayed(pod: MediatedPod) -> None:
    """The same body after a success is a new request: the runner asked again."""
    for _ in range(2):
        pod.upstream.enqueue(
            "openai", Reply.json(oa_calls(("t1", "desk_trade", BUY))), Reply.json(oa_text("Done."))
        )
    client = pod.openai()
    for _ in range(2):
        await client.chat.completions.create(model="gpt-4o", messages=ASK)
    assert len(trades(pod)) == 2
    assert len(pod.sent("openai")) == 4
    assert all("resumed_from" not in r for r in await pod.wait_for_audit(2))


async def test_a_different_body_is_not_a_retry(pod: MediatedPod) -> None:
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.error("openai", 500, "provider trouble"),
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.json(oa_text("Done.")),
    )
    assert (await post_openai(pod, {"model": "gpt-4o", "messages": ASK}))[0] == 502
    other = [{"role": "user", "content": "Buy one AAPL, please."}]
    assert (await post_openai(pod, {"model": "gpt-4o", "messages": other}))[0] == 200
    assert len(trades(pod)) == 2


async def test_after_the_retry_window_a_retry_starts_over(make_pod: PodFactory) -> None:
    pod = await make_pod(retry_window_ms=1)
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.error("openai", 500, "provider trouble"),
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.json(oa_text("Done.")),
    )
    body = {"model": "gpt-4o", "messages": ASK}
    assert (await post_openai(pod, body))[0] == 502
    await asyncio.sleep(0.05)
    assert (await post_openai(pod, body))[0] == 200
    assert len(trades(pod)) == 2


async def test_a_client_that_leaves_mid_tool_finds_the_call_journaled(pod: MediatedPod) -> None:
    pod.service.reply("/trades", delay_s=0.5)
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.json(oa_text("Bought.")),
    )
    impatient = asyncio.create_task(
        pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    )
    # The client leaves once the trade is at the service: mid-tool whatever the machine's load
    # (a client timeout could fire before the call left, and then nothing was journaled).
    while not trades(pod):
        await asyncio.sleep(0.01)
    impatient.cancel()
    with pytest.raises(asyncio.CancelledError):
        await impatient
    # The retry waits for the attempt still running, then resumes it.
    completion = await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    assert completion.choices[0].message.content == "Bought."
    assert len(trades(pod)) == 1
    assert len(pod.sent("openai")) == 2
    records = await pod.wait_for_audit(2)
    assert records[0]["http_status"] == 499
    assert records[1]["resumed_from"] == records[0]["id"]


async def test_concurrent_identical_requests_run_one_after_the_other(pod: MediatedPod) -> None:
    pod.service.reply("/trades", delay_s=0.3)
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.error("openai", 500, "provider trouble"),
        Reply.json(oa_text("Bought.")),
    )
    body = {"model": "gpt-4o", "messages": ASK}
    first, second = await asyncio.gather(post_openai(pod, body), post_openai(pod, body))
    assert sorted([first[0], second[0]]) == [200, 502]
    assert len(trades(pod)) == 1
    # The second waited for the first: both later model calls went on from t1's result.
    sent = pod.sent("openai")
    assert [m["messages"][-1].get("tool_call_id") for m in sent] == [None, "t1", "t1"]


async def test_a_journal_that_cannot_be_written_runs_no_destructive_call(pod: MediatedPod) -> None:
    """Without its journal line a retry could send the call again: it is not sent at all; a
    read-only call still runs, and the answer still comes."""
    (pod.state_dir / "journal").write_text("not a directory")
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY), ("q1", "desk_quote", {"symbol": "A"}))),
        Reply.json(oa_text("Could not trade.")),
    )
    completion = await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    assert completion.choices[0].message.content == "Could not trade."
    assert trades(pod) == []
    assert [r.path for r in pod.service.requests] == ["/quotes/A"]
    results = [orjson.loads(m["content"]) for m in pod.sent("openai")[1]["messages"][-2:]]
    assert results[0]["error"]["code"] == "state_unavailable"
    assert results[1]["ok"] is True


async def test_a_streaming_retry_resumes_too(pod: MediatedPod) -> None:
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.error("openai", 503, "provider trouble"),
        Reply.json(oa_text("Bought.")),
    )
    client = pod.openai()
    with pytest.raises(openai.APIError):
        stream = await client.chat.completions.create(model="gpt-4o", messages=ASK, stream=True)
        async for _ in stream:
            pass
    stream = await client.chat.completions.create(model="gpt-4o", messages=ASK, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Bought."
    assert len(trades(pod)) == 1
    records = await pod.wait_for_audit(2)
    assert records[1]["resumed_from"] == records[0]["id"]


async def test_a_result_is_durable_before_the_model_sees_it(
    pod: MediatedPod, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC §8.2: each answered call is written durably (fsync) before the result is used.
    Every sync records what the journal log held and how many model calls had gone out: the
    trade's result must be synced while only the first model call had."""
    synced: list[tuple[int, bytes]] = []

    def recording_sync(fd: int) -> None:
        os.fdatasync(fd)
        segment = Path(os.readlink(f"/proc/self/fd/{fd}"))  # the log's fd is write-only
        synced.append((len(pod.sent("openai")), segment.read_bytes()))

    monkeypatch.setattr(journal_log, "_sync", recording_sync)
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.json(oa_text("Bought AAPL.")),
    )
    status, answer = await post_openai(pod, {"model": "gpt-4o", "messages": ASK})
    assert status == 200, answer
    assert len(trades(pod)) == 1, (answer, pod.service.requests)
    assert any(calls == 1 and b'"result"' in data for calls, data in synced), synced
