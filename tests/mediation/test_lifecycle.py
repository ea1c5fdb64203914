"""Client disconnects, keep-alives, concurrent conversations and restarts between turns."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import openai
import pytest

from tests.mediation.conftest import MediatedPod
from tests.mediation.scripted import an_calls, an_text, oa_calls, oa_text
from tests.support.upstream import Reply

MODEL = "gpt-4o"


def script(pod: MediatedPod, *bodies: dict[str, Any]) -> None:
    pod.upstream.enqueue("openai", *(Reply.json(b) for b in bodies))


def hidden_call_ids(body: dict[str, Any]) -> list[str]:
    return [c["id"] for m in body["messages"] for c in m.get("tool_calls") or []]


async def post_stream(pod: MediatedPod, session: aiohttp.ClientSession) -> aiohttp.ClientResponse:
    return await session.post(
        pod.sidecar.openai_base_url + "/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True},
        headers={"Authorization": f"Bearer {pod.tokens['analyst']}"},
    )


async def test_streaming_clients_get_headers_at_once_and_keep_alives(pod: MediatedPod) -> None:
    pod.service.reply("/slow", delay_s=0.6)
    script(pod, oa_calls(("c1", "desk_slow", {})), oa_text("slow but done"))
    async with aiohttp.ClientSession() as session:
        response = await post_stream(pod, session)
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert pod.service.completed == 0  # headers arrived while the tool was still running
        body = await response.read()
    assert body.startswith(b": keep-alive\n\n")
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[0].startswith(b'data: {"id"') and b'"role":"assistant"' in events[0]
    assert events[-1] == b"data: [DONE]"


@pytest.mark.parametrize("stream", [True, False])
async def test_a_client_that_leaves_mid_loop_still_gets_its_call_completed_and_audited(
    pod: MediatedPod, stream: bool
) -> None:
    pod.service.reply("/slow", delay_s=1.0)
    script(pod, oa_calls(("c1", "desk_slow", {})), oa_text("nobody reads this"))
    if stream:
        async with aiohttp.ClientSession() as session:
            response = await post_stream(pod, session)
            assert response.status == 200
            while not pod.service.requests:  # leave once the call is on its way
                await asyncio.sleep(0.01)
            response.close()
    else:
        client = pod.openai(timeout=0.4)
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}]
            )
    (record,) = await pod.wait_for_audit(1)
    assert pod.service.completed == 1
    (call,) = record["tool_trace"][0]["calls"]
    assert (call["executed"], call["status"]) == (True, 200)
    assert record["outcome"] == {"status": "error", "code": "client_disconnected"}
    assert len(pod.sent("openai")) == 1  # no model call after the client left


async def test_a_client_that_leaves_during_the_final_call_is_recorded_as_gone(
    pod: MediatedPod,
) -> None:
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("c1", "desk_quote", {"symbol": "A"}))),
        Reply.json(oa_text("too late"), delay=0.5),
    )
    async with aiohttp.ClientSession() as session:
        response = await post_stream(pod, session)
        while len(pod.sent("openai")) < 2:  # the final call is under way
            await asyncio.sleep(0.01)
        response.close()
    (record,) = await pod.wait_for_audit(1)
    assert record["outcome"] == {"status": "error", "code": "client_disconnected"}
    assert record["usage"]["rounds"] == 1
    assert record["tool_trace"][0]["calls"][0]["executed"] is True


async def test_concurrent_conversations_of_one_agent_never_mix(pod: MediatedPod) -> None:
    pod.service.reply(None, delay_s=0.05)
    script(
        pod,
        oa_calls(("call_one", "desk_quote", {"symbol": "ONE"})),
        oa_calls(("call_two", "desk_quote", {"symbol": "TWO"})),
        oa_text("first answer"),
        oa_text("second answer"),
    )
    client = pod.openai()
    prompts = ["conversation alpha", "conversation beta"]

    async def turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        completion = await client.chat.completions.create(model=MODEL, messages=messages)
        answer = completion.choices[0].message.model_dump(exclude_none=True)
        return [*messages, answer]

    histories = await asyncio.gather(*(turn([{"role": "user", "content": p}]) for p in prompts))
    executed_by = {
        prompt: hidden_call_ids(
            [b for b in pod.sent("openai") if b["messages"][0]["content"] == prompt][-1]
        )
        for prompt in prompts
    }
    assert sorted(executed_by["conversation alpha"] + executed_by["conversation beta"]) == [
        "call_one",
        "call_two",
    ]
    script(pod, oa_text("fine"), oa_text("fine"))
    sent_before = len(pod.sent("openai"))
    await asyncio.gather(*(turn([*h, {"role": "user", "content": "and now?"}]) for h in histories))
    for body in pod.sent("openai")[sent_before:]:
        prompt = body["messages"][0]["content"]
        assert hidden_call_ids(body) == executed_by[prompt]


async def test_hidden_rounds_survive_a_sidecar_restart(pod: MediatedPod) -> None:
    pod.upstream.enqueue(
        "anthropic",
        Reply.json(an_calls(("toolu_1", "desk_quote", {"symbol": "AAPL"}))),
        Reply.json(an_text("AAPL is 1.")),
    )
    ask = [{"role": "user", "content": "AAPL?"}]
    first = await pod.anthropic().messages.create(
        model="claude-sonnet-4-6", max_tokens=64, messages=ask
    )
    await pod.restart()
    pod.upstream.enqueue("anthropic", Reply.json(an_text("Still 1.")))
    history = [
        *ask,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": "still?"},
    ]
    await pod.anthropic().messages.create(
        model="claude-sonnet-4-6", max_tokens=64, messages=history
    )
    messages = pod.sent("anthropic")[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[1]["content"][0]["id"] == "toolu_1"
    assert messages[2]["content"][0]["tool_use_id"] == "toolu_1"


async def test_each_tool_call_is_counted_once_in_the_metrics(pod: MediatedPod) -> None:
    # The executor used to count its own outcomes and the driver the rest; one path counts now.
    pod.service.reply("/slow")
    script(pod, oa_calls(("c1", "desk_slow", {})), oa_text("done"))
    await pod.openai().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}]
    )
    await pod.wait_for_audit(1)
    metrics = pod.sidecar.state.metrics.registry
    labels = {"tool": "desk.slow", "outcome": "ok"}
    assert metrics.get_sample_value("claw_tool_calls_total", labels) == 1
    assert metrics.get_sample_value("claw_tool_latency_seconds_count", {"tool": "desk.slow"}) == 1


async def test_a_tool_call_of_a_mediated_request_runs_in_its_drivers_task(
    pod: MediatedPod, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver is already a task no client cancels (a client that leaves mid-call still gets
    the call completed and audited, above): its calls need no task of their own each."""
    spawned: list[str] = []
    tasks = pod.sidecar.state.tasks
    spawn = tasks.spawn

    def counted(work: Any) -> Any:
        spawned.append(work.__qualname__)
        return spawn(work)

    monkeypatch.setattr(tasks, "spawn", counted)
    script(pod, oa_calls(("c1", "desk_quote", {"symbol": "AAPL"})), oa_text("up"))
    client = pod.openai()
    await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert spawned == ["_Driver.run"]
    (record,) = await pod.wait_for_audit(1)
    assert record["tool_trace"][0]["calls"][0]["executed"]
