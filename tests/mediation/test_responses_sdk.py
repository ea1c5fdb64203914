"""Mediated OpenAI Responses driven by the real openai SDK: hidden rounds, runner tools, mixed
turns, reasoning items, provider-held chains and one well-formed stream lifecycle."""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest

from clawpod.sidecar.codecs.sse import parse_events
from tests.mediation.conftest import MediatedPod
from tests.support import responses as r

ASK = "What is AAPL at?"
LOCAL_TOOL = {
    "type": "function",
    "name": "notify_user",
    "description": "runner-side",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    "strict": False,
}
WEB_SEARCH = {"type": "web_search"}


def script(pod: MediatedPod, *bodies: dict[str, Any], stream: bool = False) -> None:
    pod.upstream.enqueue("responses", *(r.reply(b, stream=stream) for b in bodies))


def sent(pod: MediatedPod) -> list[dict[str, Any]]:
    return [x.json for x in pod.upstream.requests_to("responses")]


def outputs(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in body["input"] if i.get("type") == "function_call_output"]


@pytest.mark.parametrize("stream_upstream", [False, True])
async def test_hidden_round_then_answer(pod: MediatedPod, stream_upstream: bool) -> None:
    script(
        pod,
        r.response(r.call("call_1", "desk_quote", {"symbol": "AAPL"}), input_tokens=100),
        r.response(r.message("AAPL trades at 1."), response_id="resp_2", input_tokens=150),
        stream=stream_upstream,
    )
    client = pod.openai()
    answer = await client.responses.create(model="gpt-4o", input=ASK, tools=[LOCAL_TOOL])
    assert answer.output_text == "AAPL trades at 1."
    assert answer.id == "resp_2"
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (250, 6)
    assert [t.name for t in answer.tools] == ["notify_user"]  # the runner's own tools only
    first, second = sent(pod)
    assert first["stream"] is False and first["input"] == [{"role": "user", "content": ASK}]
    assert first["tools"][0] == LOCAL_TOOL
    managed = first["tools"][1]
    assert managed["type"] == "function" and managed["name"] == "desk_quote"
    assert set(managed) == {"type", "name", "description", "parameters"}
    (result,) = outputs(second)
    assert result["call_id"] == "call_1"
    assert orjson.loads(result["output"])["data"]["path"] == "/quotes/AAPL"
    assert second["input"][1]["type"] == "function_call"  # the model's call, untouched
    (record,) = await pod.wait_for_audit(1)
    assert record["route"] == "/v1/responses" and record["mode"] == "mediated"
    assert record["usage"] == {"input_tokens": 250, "output_tokens": 6, "rounds": 1}


async def test_stream_helper_gets_one_lifecycle(pod: MediatedPod) -> None:
    script(
        pod,
        r.response(
            r.reasoning("rs_1", summary="look it up"),
            r.call("call_1", "desk_quote", {"symbol": "AAPL"}),
        ),
        r.response(
            r.reasoning("rs_2", summary="answer"),
            r.message("Up. " * 100),
            response_id="resp_final",
        ),
    )
    client = pod.openai()
    async with client.responses.stream(model="gpt-4o", input=ASK) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    assert final.id == "resp_final" and final.output_text == "Up. " * 100
    assert [i.type for i in final.output] == ["reasoning", "message"]
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Up. " * 100
    summaries = [e for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert [e.delta for e in summaries] == ["answer"]  # the hidden turn's reasoning stays hidden
    assert final.usage.input_tokens == 20


async def test_raw_stream_frames_are_well_formed(pod: MediatedPod) -> None:
    script(
        pod,
        r.response(r.call("call_1", "desk_quote", {"symbol": "AAPL"})),
        r.response(r.message("done")),
    )
    client = pod.openai()
    async with client.responses.with_streaming_response.create(
        model="gpt-4o", input=ASK, stream=True
    ) as raw:
        assert raw.headers["content-type"].startswith("text/event-stream")
        data = await raw.read()
    events = list(parse_events(data))
    payloads = [orjson.loads(text) for _, text in events]
    assert all(name == p["type"] for (name, _), p in zip(events, payloads, strict=True))
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    added = [p["output_index"] for p in payloads if p["type"] == "response.output_item.added"]
    done = [p["output_index"] for p in payloads if p["type"] == "response.output_item.done"]
    assert added == done == [0]


async def test_runner_tool_call_goes_back_to_the_runner(pod: MediatedPod) -> None:
    script(pod, r.response(r.call("call_9", "notify_user", {"text": "hi"})), stream=True)
    client = pod.openai()
    answer = await client.responses.create(model="gpt-4o", input=ASK, tools=[LOCAL_TOOL])
    (item,) = answer.output
    assert (item.type, item.name, item.call_id) == ("function_call", "notify_user", "call_9")
    assert pod.service.requests == []


async def test_mixed_turn_is_refused(pod: MediatedPod) -> None:
    script(
        pod,
        r.response(
            r.call("call_1", "desk_quote", {"symbol": "AAPL"}),
            r.call("call_2", "notify_user", {"text": "hi"}),
        ),
    )
    client = pod.openai()
    with pytest.raises(openai.APIStatusError) as caught:
        await client.responses.create(model="gpt-4o", input=ASK, tools=[LOCAL_TOOL])
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "mixed_executor_response"
    assert "notify_user (call_2)" in caught.value.body["message"]
    assert pod.service.requests == []


async def test_mixed_turn_while_streaming_ends_in_response_failed(pod: MediatedPod) -> None:
    script(
        pod,
        r.response(
            r.call("call_1", "desk_quote", {"symbol": "AAPL"}),
            r.call("call_2", "notify_user", {"text": "hi"}),
        ),
    )
    client = pod.openai()
    stream = await client.responses.create(
        model="gpt-4o", input=ASK, tools=[LOCAL_TOOL], stream=True
    )
    events = [event async for event in stream]
    assert [e.type for e in events] == ["response.created", "response.failed"]
    assert events[1].response.error.code == "mixed_executor_response"
    assert events[0].response.id == events[1].response.id


async def test_reasoning_and_unknown_items_replayed_in_order(pod: MediatedPod) -> None:
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {}}
    novel = {"id": "x_1", "type": "some_future_item", "payload": [1, 2]}
    hidden = r.response(
        r.reasoning("rs_1", encrypted="gAAAA-secret-thoughts"),
        search,
        novel,
        r.call("call_1", "desk_quote", {"symbol": "AAPL"}),
    )
    script(pod, hidden, r.response(r.message("AAPL is up.")))
    client = pod.openai()
    await client.responses.create(
        model="gpt-4o",
        input=[{"role": "user", "content": ASK}],
        tools=[WEB_SEARCH],
        store=False,
        include=["reasoning.encrypted_content"],
    )
    first, second = sent(pod)
    assert first["tools"][0] == WEB_SEARCH
    assert first["store"] is False and first["include"] == ["reasoning.encrypted_content"]
    assert "previous_response_id" not in second
    assert second["input"][1:5] == hidden["output"]
    assert second["input"][5]["type"] == "function_call_output"


async def test_store_true_chains_hidden_calls_on_the_provider(pod: MediatedPod) -> None:
    script(
        pod,
        r.response(r.message("AAPL is up."), response_id="resp_earlier"),
        r.response(r.call("call_1", "desk_quote", {"symbol": "AAPL"}), response_id="resp_h1"),
        r.response(r.call("call_2", "desk_quote", {"symbol": "MSFT"}), response_id="resp_h2"),
        r.response(r.message("Both up."), response_id="resp_final", previous_response_id="resp_h2"),
    )
    client = pod.openai()
    # The earlier turn this one continues: its id is this agent's (stored objects are bound).
    await client.responses.create(model="gpt-4o", input="AAPL?", store=True)
    answer = await client.responses.create(
        model="gpt-4o",
        input="and MSFT?",
        previous_response_id="resp_earlier",
        store=True,
        instructions="be brief",
    )
    assert answer.id == "resp_final"
    assert answer.previous_response_id == "resp_earlier"
    first, second, third = sent(pod)[1:]
    assert first["previous_response_id"] == "resp_earlier"
    assert first["input"] == [{"role": "user", "content": "and MSFT?"}]
    assert second["previous_response_id"] == "resp_h1"
    assert [i["type"] for i in second["input"]] == ["function_call_output"]
    assert second["input"][0]["call_id"] == "call_1"
    assert third["previous_response_id"] == "resp_h2"
    assert [i["call_id"] for i in third["input"]] == ["call_2"]
    assert all(body["instructions"] == "be brief" for body in (first, second, third))
    assert all(body["store"] is True for body in (first, second, third))


async def test_store_false_restores_hidden_rounds_next_turn(pod: MediatedPod) -> None:
    hidden = r.response(
        r.reasoning("rs_1", encrypted="enc-1"), r.call("call_1", "desk_quote", {"symbol": "AAPL"})
    )
    final = r.response(r.reasoning("rs_2", encrypted="enc-2"), r.message("AAPL is up."))
    script(pod, hidden, final, r.response(r.message("You are welcome.")))
    client = pod.openai()
    first_turn = [{"role": "user", "content": ASK}]
    answer = await client.responses.create(model="gpt-4o", input=first_turn, store=False)
    # A stateless runner sends the output back without ids, as plain dicts.
    echoed = [
        {k: v for k, v in item.model_dump(exclude_none=True).items() if k != "id"}
        for item in answer.output
    ]
    await client.responses.create(
        model="gpt-4o",
        input=[*first_turn, *echoed, {"role": "user", "content": "thanks"}],
        store=False,
    )
    third = sent(pod)[2]
    types = [i.get("type", "message") for i in third["input"]]
    assert types == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "message",
        "message",
    ]
    assert third["input"][1]["encrypted_content"] == "enc-1"


async def test_tool_choice_forms_are_rewritten(pod: MediatedPod) -> None:
    script(pod, r.response(r.message("ok")), r.response(r.message("ok")))
    client = pod.openai()
    await client.responses.create(
        model="gpt-4o",
        input=ASK,
        tools=[LOCAL_TOOL],
        tool_choice={"type": "function", "name": "desk.quote"},
        parallel_tool_calls=False,
        max_tool_calls=3,
    )
    allowed = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "desk.trade"}, {"type": "web_search"}],
    }
    await client.responses.create(model="gpt-4o", input=ASK, tool_choice=allowed)
    named, restricted = sent(pod)
    assert named["tool_choice"] == {"type": "function", "name": "desk_quote"}
    assert (named["parallel_tool_calls"], named["max_tool_calls"]) == (False, 3)
    assert restricted["tool_choice"]["tools"] == [
        {"type": "function", "name": "desk_trade"},
        {"type": "web_search"},
    ]
    assert restricted["tool_choice"]["mode"] == "required"


async def test_bad_input_is_a_400_in_openai_shape(pod: MediatedPod) -> None:
    client = pod.openai()
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(model="gpt-4o", input=[])
    assert "input" in caught.value.body["message"]


async def test_upstream_failure_mid_request_is_openai_shaped(pod: MediatedPod) -> None:
    script(pod, r.response(r.call("call_1", "desk_quote", {"symbol": "AAPL"})))
    pod.upstream.enqueue("responses", r.Reply.error("openai", 500, "boom"))
    client = pod.openai()
    with pytest.raises(openai.APIStatusError) as caught:
        await client.responses.create(model="gpt-4o", input=ASK)
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "upstream_error"


@pytest.mark.parametrize("stream_upstream", [False, True])
async def test_a_mediated_agent_cannot_continue_anothers_stored_responses(
    pod: MediatedPod, stream_upstream: bool
) -> None:
    script(
        pod,
        r.response(r.call("call_1", "desk_quote", {"symbol": "AAPL"}), response_id="resp_h1"),
        r.response(r.message("AAPL is up."), response_id="resp_final"),
        stream=stream_upstream,
    )
    answer = await pod.openai().responses.create(model="gpt-4o", input=ASK, store=True)
    assert answer.id == "resp_final"
    ops = pod.openai(agent="ops")
    for stolen in ("resp_final", "resp_h1"):  # the answer, and a hidden round's id
        with pytest.raises(openai.NotFoundError) as caught:
            await ops.responses.create(
                model="gpt-4o", input="and now?", previous_response_id=stolen, store=True
            )
        assert caught.value.body["code"] == "response_not_found"
    assert len(sent(pod)) == 2  # nothing of ops' reached the provider
    script(pod, r.response(r.message("Still up."), response_id="resp_next"))
    more = await pod.openai().responses.create(
        model="gpt-4o", input="and now?", previous_response_id="resp_final", store=True
    )
    assert more.id == "resp_next"
