"""The Responses codec on the sans-IO engine: item grouping, continuity keys, chaining on a
provider-held conversation, tool choice forms, folding upstream streams and the lifecycle."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from clawpod.sidecar.codecs.sse import parse_events
from clawpod.sidecar.mediation.commands import Remember
from clawpod.sidecar.model.conversation import CodecError
from clawpod.sidecar.model.errors import ApiError
from clawpod.sidecar.state.continuity import ContinuityStore
from tests.mediation.scripted import agent, drive, engine_for
from tests.support import responses as r
from tests.support.codecs import codec_of

CODEC = codec_of("responses")
QUOTE = r.call("call_1", "desk_lookup", {"symbol": "AAPL"})


def request(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "input": "What is AAPL at?", **extra}


def run(body: dict[str, Any], *replies: dict[str, Any], store: ContinuityStore | None = None):
    return drive(engine_for("responses", body), replies, store=store)


def test_string_input_and_item_groups() -> None:
    conversation = CODEC.parse_request(
        request(
            input=[
                {"role": "user", "content": "hi"},
                r.reasoning("rs_1"),
                r.call("c1", "notify", {}),
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
                r.message("done"),
                {"type": "message", "role": "developer", "content": "be brief"},
            ]
        )
    )
    assert conversation.roles == [
        "user",
        "assistant",
        "function_call_output",
        "assistant",
        "developer",
    ]
    assert [len(g["items"]) for g in conversation.messages] == [1, 2, 1, 1, 1]
    assert CODEC.parse_request(request()).messages == [
        {"role": "user", "items": [{"role": "user", "content": "What is AAPL at?"}]}
    ]


def test_echo_fingerprint_ignores_ids_statuses_reasoning_and_part_types() -> None:
    answer = {"output": [r.reasoning("rs_9", encrypted="x"), r.message("AAPL is up.")]}
    conversation = CODEC.parse_request(request())
    echoed = {"role": "assistant", "content": [{"type": "output_text", "text": "AAPL is up."}]}
    plain = {"role": "assistant", "content": "AAPL is up."}
    expected = CODEC.echo_fingerprint(conversation, answer)
    assert CODEC.fingerprint({"role": "assistant", "items": [echoed]}) == expected
    assert CODEC.fingerprint({"role": "assistant", "items": [plain]}) == expected
    other = {"role": "assistant", "content": "AAPL is down."}
    assert CODEC.fingerprint({"role": "assistant", "items": [other]}) != expected


@pytest.mark.parametrize("bad", [[], 3, [1], None])
def test_bad_input_is_a_codec_error(bad: Any) -> None:
    with pytest.raises(CodecError):
        CODEC.parse_request(request(input=bad))


def test_hidden_round_is_remembered_and_answer_keeps_the_final_id() -> None:
    final = r.response(r.message("AAPL is up."), response_id="resp_2")
    transcript = run(request(store=False), r.response(QUOTE), final)
    assert transcript.response.body["id"] == "resp_2"
    # Under its echo and under its item reference (the id of its message), in one entry.
    (remember,) = transcript.of(Remember)
    assert len(remember.keys) == 2 and remember.origin == remember.keys[0]
    # The answer is kept after the round: an echo by reference comes back as it.
    assert [g["role"] for g in remember.messages] == ["assistant", "tool", "assistant"]
    assert remember.messages[0]["items"] == [QUOTE]
    assert remember.messages[-1]["items"] == final["output"]


def test_store_false_sends_everything_again() -> None:
    transcript = run(request(store=False), r.response(QUOTE), r.response(r.message("up")))
    second = transcript.upstream_bodies[1]
    assert "previous_response_id" not in second
    assert [i.get("type", "message") for i in second["input"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]


def test_store_unset_without_a_chain_sends_everything_again() -> None:
    transcript = run(request(), r.response(QUOTE), r.response(r.message("up")))
    assert "previous_response_id" not in transcript.upstream_bodies[1]


def test_a_server_held_conversation_gets_only_new_items() -> None:
    transcript = run(request(conversation="conv_1"), r.response(QUOTE), r.response(r.message("up")))
    second = transcript.upstream_bodies[1]
    assert second["conversation"] == "conv_1" and "previous_response_id" not in second
    assert [i["type"] for i in second["input"]] == ["function_call_output"]


def test_chained_finalizing_call_withdraws_tools() -> None:
    engine = engine_for("responses", request(store=True), agent(max_rounds=1))
    transcript = drive(
        engine,
        [
            r.response(QUOTE, response_id="resp_a"),
            r.response(r.message("out of budget")),
        ],
    )
    last = transcript.upstream_bodies[-1]
    assert last["tool_choice"] == "none" and last["previous_response_id"] == "resp_a"
    output = orjson.loads(last["input"][0]["output"])
    assert output["ok"] is True


def test_custom_tool_calls_belong_to_the_runner() -> None:
    custom = {"type": "custom_tool_call", "call_id": "ct_1", "name": "apply_patch", "input": "x"}
    turn = CODEC.parse_response(r.response(custom, QUOTE))
    assert [(c.id, c.name) for c in turn.calls] == [
        ("ct_1", "apply_patch"),
        ("call_1", "desk_lookup"),
    ]
    transcript = run(
        request(tools=[{"type": "custom", "name": "apply_patch"}]), r.response(custom, QUOTE)
    )
    assert transcript.failure.code == "mixed_executor_response"


def test_mixed_retry_answers_each_call_in_its_own_output_type() -> None:
    custom = {"type": "custom_tool_call", "call_id": "ct_1", "name": "apply_patch", "input": "x"}
    engine = engine_for("responses", request(), agent(on_mixed="retry"))
    transcript = drive(engine, [r.response(custom, QUOTE), r.response(r.message("ok"))])
    answers = transcript.upstream_bodies[1]["input"][-2:]
    assert [a["type"] for a in answers] == ["custom_tool_call_output", "function_call_output"]


def test_failed_upstream_response_is_a_protocol_error() -> None:
    failed = r.response(status="failed", error={"code": "server_error", "message": "x"})
    assert run(request(), failed).failure.code == "upstream_protocol_error"


def test_assemble_stream_folds_the_completed_response() -> None:
    body = r.response(r.reasoning("rs_1", encrypted="e"), QUOTE)
    assert CODEC.assemble_stream(r.sse(body)) == body
    empty_terminal = r.sse(body).replace(orjson.dumps(body["output"]), b"[]")
    assert CODEC.assemble_stream(empty_terminal)["output"] == body["output"]
    incomplete = r.response(r.message("cut"), status="incomplete")
    assert CODEC.assemble_stream(r.sse(incomplete))["status"] == "incomplete"


def test_assemble_stream_refuses_failed_cut_and_error_streams() -> None:
    with pytest.raises(CodecError, match="failed"):
        CODEC.assemble_stream(r.sse(r.response(status="failed", error={"message": "no"})))
    whole = r.sse(r.response(r.message("hello")))
    with pytest.raises(CodecError, match="ended before"):
        CODEC.assemble_stream(whole[: whole.index(b"event: response.completed")])
    with pytest.raises(CodecError, match="boom"):
        CODEC.assemble_stream(b'event: error\ndata: {"type":"error","message":"boom"}\n\n')


def test_render_stream_numbers_every_event_and_keeps_items_whole() -> None:
    refusal = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "refusal", "refusal": "no"}],
    }
    novel = {"id": "x_1", "type": "some_future_item", "payload": 1}
    body = r.response(r.reasoning("rs_1", summary="thinking"), novel, refusal, r.message("hi"))
    conversation = CODEC.parse_request(request(stream=True))
    events = [
        orjson.loads(text)
        for _, text in parse_events(b"".join(CODEC.render_stream(conversation, body)))
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == body["output"]
    assert events[-1] == {
        "type": "response.completed",
        "response": body,
        "sequence_number": len(events) - 1,
    }
    incomplete = {**body, "status": "incomplete"}
    last = CODEC.render_stream(conversation, incomplete)[-1]
    assert last.startswith(b"event: response.incomplete\n")


def test_stream_failure_is_a_lifecycle_of_its_own() -> None:
    conversation = CODEC.parse_request(request(stream=True))
    frames = CODEC.stream_failure(conversation, ApiError(502, "mixed_executor_response", "no"))
    created, failed = (orjson.loads(text) for _, text in parse_events(frames))
    assert (created["type"], failed["type"]) == ("response.created", "response.failed")
    assert failed["response"]["error"] == {"code": "mixed_executor_response", "message": "no"}
    assert created["response"]["id"] == failed["response"]["id"]
    assert (created["sequence_number"], failed["sequence_number"]) == (0, 1)


def test_continuity_restores_hidden_rounds_before_the_answer(tmp_path) -> None:
    store = ContinuityStore(tmp_path)
    first = run(
        request(store=False), r.response(QUOTE), r.response(r.message("AAPL is up.")), store=store
    )
    answer = first.response.body["output"]
    follow_up = request(
        store=False,
        input=[
            {"role": "user", "content": "What is AAPL at?"},
            *answer,
            {"role": "user", "content": "thanks"},
        ],
    )
    second = run(follow_up, r.response(r.message("welcome")), store=store)
    sent = second.upstream_bodies[0]["input"]
    assert [i.get("type", "message") for i in sent] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]
