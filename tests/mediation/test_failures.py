"""Failure paths of mediated requests, end to end through the SDKs and a real tool service."""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest

from clawpod.sidecar.manifest import ToolPolicy
from tests.mediation.conftest import MediatedPod, PodFactory
from tests.mediation.scripted import an_calls, an_text, oa_calls, oa_text
from tests.support.upstream import Reply

MODEL = "gpt-4o"
ASK = [{"role": "user", "content": "What is AAPL at?"}]


def script(pod: MediatedPod, *replies: dict[str, Any] | Reply) -> None:
    pod.upstream.enqueue("openai", *(r if isinstance(r, Reply) else Reply.json(r) for r in replies))


def results_sent(pod: MediatedPod, index: int = 1) -> list[dict[str, Any]]:
    body = pod.sent("openai")[index]
    return [orjson.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


async def expect_error(pod: MediatedPod, status: int, code: str, **kwargs: Any) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        await pod.openai().chat.completions.create(model=MODEL, messages=ASK, **kwargs)
    assert caught.value.status_code == status
    assert caught.value.body["code"] == code
    records = await pod.wait_for_audit(1)
    assert records[-1]["outcome"] == {"status": "error", "code": code}
    assert records[-1]["http_status"] == status


# --- upstream failures mid-loop -------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "status", "code"),
    [
        (Reply.error("openai", 500, "the model broke"), 502, "upstream_error"),
        (
            Reply.error("openai", 400, "context too long", "invalid_request_error"),
            400,
            "upstream_error",
        ),
        (Reply.garbage(), 502, "upstream_protocol_error"),
        (Reply.dropped(), 502, "upstream_protocol_error"),
    ],
)
async def test_upstream_failure_after_a_round(
    pod: MediatedPod, reply: Reply, status: int, code: str
) -> None:
    # A model call dropped unanswered on a reused connection is sent once more on a new one:
    # a drop fails the request only when the second try is dropped too.
    again = [reply] if reply.reset else []
    script(pod, oa_calls(("c1", "desk_quote", {"symbol": "AAPL"})), reply, *again)
    await expect_error(pod, status, code)
    assert len(pod.service.requests) == 1
    assert pod.audit()[-1]["tool_trace"][0]["calls"][0]["status"] == 200


async def test_upstream_timeout_mid_loop_is_504(make_pod: PodFactory) -> None:
    pod = await make_pod(upstream_timeout_ms=300)
    script(pod, oa_calls(("c1", "desk_quote", {"symbol": "AAPL"})), Reply.hang(3))
    await expect_error(pod, 504, "upstream_timeout")


async def test_errors_after_stream_headers_are_stream_errors(pod: MediatedPod) -> None:
    script(
        pod, oa_calls(("c1", "desk_quote", {"symbol": "AAPL"})), Reply.error("openai", 503, "down")
    )
    stream = await pod.openai().chat.completions.create(model=MODEL, messages=ASK, stream=True)
    with pytest.raises(openai.APIError, match="down"):
        async for _ in stream:
            pass
    pod.upstream.enqueue(
        "anthropic",
        Reply.json(an_calls(("t1", "desk_quote", {"symbol": "A"}))),
        Reply.error("anthropic", 529, "overloaded", "overloaded_error"),
    )
    client = pod.anthropic()
    with pytest.raises(anthropic.APIError, match="overloaded"):
        async with client.messages.stream(
            model="claude-sonnet-4-6", max_tokens=64, messages=ASK
        ) as events:
            async for _ in events:
                pass


# --- tool failures --------------------------------------------------------------------------


async def test_tool_failures_become_envelopes_the_model_can_read(make_pod: PodFactory) -> None:
    pod = await make_pod(policy=ToolPolicy(timeout_per_tool_ms=300, max_tool_result_bytes=1000))
    pod.service.reply("/quotes/FAIL", status=503, json={"error": "maintenance"})
    pod.service.reply("/quotes/SLOW", delay_s=1.0)
    pod.service.reply("/quotes/TEXT", text="<html>hello</html>", content_type="text/html")
    pod.service.reply("/quotes/HUGE", size=50_000)
    symbols = ["FAIL", "SLOW", "TEXT", "HUGE"]
    script(
        pod,
        oa_calls(*((f"c{i}", "desk_quote", {"symbol": s}) for i, s in enumerate(symbols))),
        oa_text("Some data is missing."),
    )
    completion = await pod.openai().chat.completions.create(model=MODEL, messages=ASK)
    assert completion.choices[0].message.content == "Some data is missing."
    fail, slow, text, huge = results_sent(pod)
    assert (fail["ok"], fail["error"]["code"], fail["status"]) == (False, "http_503", 503)
    assert slow["error"]["code"] == "timeout"
    assert text["ok"] is True
    assert huge["truncated"] is True and huge["original_bytes"] == 50_000
    record = (await pod.wait_for_audit(1))[-1]
    codes = [c["error_code"] for c in record["tool_trace"][0]["calls"]]
    assert codes == ["http_503", "timeout", None, None]


async def test_invalid_and_malformed_arguments_never_reach_the_service(pod: MediatedPod) -> None:
    script(
        pod,
        oa_calls(
            ("c1", "desk_quote", "{this is not json"),
            ("c2", "desk_trade", {"symbol": "AAPL", "side": "hold", "quantity": -1}),
        ),
        oa_text("I will fix my arguments."),
    )
    await pod.openai().chat.completions.create(model=MODEL, messages=ASK)
    assert pod.service.requests == []
    malformed, invalid = results_sent(pod)
    assert malformed["error"]["code"] == invalid["error"]["code"] == "invalid_arguments"
    assert "side" in invalid["error"]["message"]


@pytest.mark.parametrize("name", ["made_up_tool", "ops_restart", "desk.quote"])
async def test_unknown_and_foreign_names_are_returned_not_executed(
    pod: MediatedPod, name: str
) -> None:
    script(pod, oa_calls(("c1", name, {})))
    completion = await pod.openai().chat.completions.create(model=MODEL, messages=ASK)
    assert completion.choices[0].message.tool_calls[0].function.name == name
    assert pod.service.requests == []


async def test_path_values_cannot_escape_their_segment(pod: MediatedPod) -> None:
    script(pod, oa_calls(("c1", "desk_quote", {"symbol": "../admin?x=1"})), oa_text("ok"))
    await pod.openai().chat.completions.create(model=MODEL, messages=ASK)
    assert pod.service.requests[0].raw_path == "/quotes/..%2Fadmin%3Fx%3D1"


# --- mixed, budgets -------------------------------------------------------------------------

LOCAL = {"type": "function", "function": {"name": "local", "parameters": {"type": "object"}}}
MIXED = oa_calls(("m1", "desk_quote", {"symbol": "A"}), ("r1", "local", {}))


async def test_mixed_response_refused(pod: MediatedPod) -> None:
    script(pod, MIXED)
    await expect_error(pod, 502, "mixed_executor_response", tools=[LOCAL])
    assert pod.service.requests == []


async def test_mixed_response_retry_then_refuse(make_pod: PodFactory) -> None:
    pod = await make_pod(on_mixed="retry")
    script(pod, MIXED, oa_calls(("r2", "local", {})))
    completion = await pod.openai().chat.completions.create(
        model=MODEL, messages=ASK, tools=[LOCAL]
    )
    assert completion.choices[0].message.tool_calls[0].id == "r2"
    assert [r["error"]["code"] for r in results_sent(pod)] == ["mixed_executor_response"] * 2
    script(pod, MIXED, MIXED)
    with pytest.raises(openai.APIStatusError) as caught:
        await pod.openai().chat.completions.create(model=MODEL, messages=ASK, tools=[LOCAL])
    assert caught.value.status_code == 502
    assert pod.service.requests == []


async def test_max_rounds_then_final_answer(make_pod: PodFactory) -> None:
    pod = await make_pod(policy=ToolPolicy(max_rounds=1))
    script(
        pod,
        oa_calls(("c1", "desk_quote", {"symbol": "A"})),
        oa_text("Out of budget, A is 1."),
    )
    completion = await pod.openai().chat.completions.create(model=MODEL, messages=ASK)
    assert completion.choices[0].message.content == "Out of budget, A is 1."
    assert len(pod.service.requests) == 1
    # SPEC 4.2.11: the call after the last allowed round already has tools withdrawn.
    assert len(pod.sent("openai")) == 2
    final = pod.sent("openai")[1]
    assert final["tool_choice"] == "none"
    assert results_sent(pod, 1)[-1]["ok"] is True


async def test_tool_budget_exhausted_when_the_model_insists(make_pod: PodFactory) -> None:
    pod = await make_pod(policy=ToolPolicy(max_rounds=1))
    script(
        pod,
        oa_calls(("c1", "desk_quote", {"symbol": "A"})),
        oa_calls(("c2", "desk_quote", {"symbol": "B"})),
    )
    await expect_error(pod, 502, "tool_budget_exhausted")
    assert len(pod.service.requests) == 1


async def test_a_malformed_request_is_a_400_in_protocol_shape(pod: MediatedPod) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            pod.sidecar.openai_base_url + "/chat/completions",
            json={"model": MODEL, "messages": "not a list"},
            headers={"Authorization": f"Bearer {pod.tokens['analyst']}"},
        ) as response,
    ):
        body = await response.json()
    assert response.status == 400
    assert body["error"]["code"] == "invalid_request"
    assert pod.upstream.requests_to("openai") == []
    anthropic_client = pod.anthropic()
    with pytest.raises(anthropic.BadRequestError):
        await anthropic_client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=5,
            messages=[{"content": "no role"}],  # type: ignore[list-item]
        )
    pod.upstream.enqueue("anthropic", Reply.json(an_text("unused")))
