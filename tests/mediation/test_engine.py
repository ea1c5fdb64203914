"""docs/contract.md §4.2 decisions of the sans-IO engine, every codec, no sockets."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from clawpod.sidecar.codecs import CODECS
from clawpod.sidecar.manifest import Effect
from clawpod.sidecar.mediation.commands import (
    BeginStream,
    CallModel,
    ExecuteTools,
    ModelFailed,
    Remember,
)
from clawpod.sidecar.mediation.tool_offer import present_tools
from clawpod.sidecar.model.conversation import ToolOutcome
from tests.mediation.scripted import (
    CANCEL,
    LOOKUP,
    MODEL_TIMEOUT_S,
    TRADE,
    Clock,
    agent,
    calls,
    drive,
    engine_for,
    messages_field,
    ok,
    request,
    text,
    tool,
)
from tests.support import responses as rs
from tests.support.codecs import EVERY_API, codec_of
from tests.support.live_stream import client_bytes

APIS = EVERY_API


def tool_names(api: str, body: dict[str, Any]) -> list[str]:
    if api == "openai":
        return [t["function"]["name"] for t in body["tools"]]
    return [t["name"] for t in body["tools"]]


def runner_tool(api: str, name: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {}}
    if api == "openai":
        return {"type": "function", "function": {"name": name, "parameters": schema}}
    if api == "responses":
        return {"type": "function", "name": name, "parameters": schema}
    return {"name": name, "input_schema": schema}


def results_of(api: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Tool results fed back to the model in the last upstream request, in order."""
    messages = body[messages_field(api)]
    if api == "anthropic":
        return [orjson.loads(b["content"]) for b in messages[-1]["content"]]
    # One message (Chat) or item (Responses) per result, ending the request.
    is_result, field = {
        "openai": (lambda m: m.get("role") == "tool", "content"),
        "responses": (lambda m: m.get("type") == "function_call_output", "output"),
    }[api]
    tail: list[dict[str, Any]] = []
    for message in reversed(messages):
        if not is_result(message):
            break
        tail.insert(0, message)
    return [orjson.loads(m[field]) for m in tail]


def as_answered(api: str, reply: dict[str, Any], body: dict[str, Any], usage: Any) -> dict:
    """A model reply as the client receives it: the request's summed usage and, in Responses
    (whose object echoes the request that made it), the runner's own tools."""
    answered = reply | {"usage": usage}
    if api == "responses":
        answered["tools"] = body.get("tools", [])
    return answered


def test_the_engine_tests_run_every_codec() -> None:
    assert [codec_of(api) for api in APIS] == list(CODECS)


# --- point 1: injection ---------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_managed_tools_are_appended_after_the_runners_own_in_provider_shape(api: str) -> None:
    body = request(api, tools=[runner_tool(api, "local_search")])
    run = drive(engine_for(api, body), [text(api, "hi")])
    upstream = run.upstream_bodies[0]
    assert tool_names(api, upstream) == ["local_search", "desk_lookup", "desk_trade", "desk_cancel"]
    managed = upstream["tools"][1]
    if api == "openai":
        assert managed["function"]["parameters"] == LOOKUP.input_schema
        assert managed["function"]["description"] == LOOKUP.description
    elif api == "responses":
        assert managed["parameters"] == LOOKUP.input_schema
        assert managed["description"] == LOOKUP.description
    else:
        assert managed["input_schema"] == LOOKUP.input_schema


@pytest.mark.parametrize("api", APIS)
def test_a_runner_tool_keeps_a_colliding_name_and_the_managed_tool_is_renamed(api: str) -> None:
    body = request(api, tools=[runner_tool(api, "desk_lookup")])
    engine = engine_for(api, body)
    run = drive(
        engine,
        [calls(api, ("c1", "desk_lookup_claw", {"symbol": "AAPL"})), text(api, "done")],
    )
    assert tool_names(api, run.upstream_bodies[0])[:2] == ["desk_lookup", "desk_lookup_claw"]
    assert [e.checked.tool.name for e in run.executions] == ["desk.lookup"]
    # The same name called by the model is the runner's tool: returned, not executed.
    again = drive(engine_for(api, body), [calls(api, ("c2", "desk_lookup", {}))])
    assert again.executions == []
    reply = calls(api, ("c2", "desk_lookup", {}))
    assert again.response.body == as_answered(api, reply, body, again.response.body["usage"])


def test_alternative_names_are_deterministic_and_avoid_every_other_name() -> None:
    named = present_tools([LOOKUP, TRADE], {"desk_lookup", "desk_lookup_claw"})
    assert list(named) == ["desk_lookup_claw2", "desk_trade"]
    assert list(present_tools([LOOKUP, TRADE], {"desk_lookup", "desk_lookup_claw"})) == list(named)


def test_legacy_functions_become_tools_and_runner_calls_go_back_as_function_call() -> None:
    body = {
        "model": "gpt-3.5-turbo",
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "w", "arguments": "{}"},
            },
            {"role": "function", "name": "w", "content": "sunny"},
        ],
        "functions": [{"name": "get_weather", "parameters": {"type": "object", "properties": {}}}],
        "function_call": {"name": "get_weather"},
    }
    run = drive(engine_for("openai", body), [calls("openai", ("call_9", "get_weather", "{}"))])
    upstream = run.upstream_bodies[0]
    assert "functions" not in upstream and "function_call" not in upstream
    assert tool_names("openai", upstream)[0] == "get_weather"
    assert upstream["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert upstream["messages"][1]["tool_calls"][0]["function"]["name"] == "w"
    assert upstream["messages"][2] == {
        "role": "tool",
        "tool_call_id": upstream["messages"][1]["tool_calls"][0]["id"],
        "content": "sunny",
    }
    choice = run.response.body["choices"][0]
    assert choice["message"]["function_call"] == {"name": "get_weather", "arguments": "{}"}
    assert "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "function_call"


# --- tool_choice and parallel_tool_calls ----------------------------------------------------

CHOICES = [
    ("openai", "none", "none"),
    ("openai", "auto", "auto"),
    ("openai", "required", "required"),
    ("anthropic", {"type": "any"}, {"type": "any"}),
    ("anthropic", {"type": "none"}, {"type": "none"}),
    (
        "anthropic",
        {"type": "auto", "disable_parallel_tool_use": True},
        {"type": "auto", "disable_parallel_tool_use": True},
    ),
    ("responses", "none", "none"),
    ("responses", "required", "required"),
    ("responses", {"type": "web_search_preview"}, {"type": "web_search_preview"}),
    (
        "responses",
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "x"}]},
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "x"}]},
    ),
]


@pytest.mark.parametrize(("api", "sent", "upstream"), CHOICES)
def test_tool_choice_is_preserved(api: str, sent: Any, upstream: Any) -> None:
    run = drive(engine_for(api, request(api, tool_choice=sent)), [text(api, "ok")])
    assert run.upstream_bodies[0]["tool_choice"] == upstream


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("named", ["desk.lookup", "desk_lookup"])
def test_a_choice_naming_a_managed_tool_is_rewritten_then_relaxed(api: str, named: str) -> None:
    choice = {
        "openai": {"type": "function", "function": {"name": named}},
        "anthropic": {"type": "tool", "name": named},
        "responses": {"type": "function", "name": named},
    }[api]
    run = drive(
        engine_for(api, request(api, tool_choice=choice)),
        [calls(api, ("c1", "desk_lookup", {"symbol": "X"})), text(api, "ok")],
    )
    first, second = (b["tool_choice"] for b in run.upstream_bodies)
    if api == "openai":
        assert first == {"type": "function", "function": {"name": "desk_lookup"}}
        assert second == "auto"
    elif api == "responses":
        assert first == {"type": "function", "name": "desk_lookup"}
        assert second == "auto"
    else:
        assert first == {"type": "tool", "name": "desk_lookup"}
        assert second == {"type": "auto"}


@pytest.mark.parametrize("api", ["openai", "responses"])
def test_parallel_tool_calls_is_preserved(api: str) -> None:
    body = request(api, parallel_tool_calls=False)
    run = drive(engine_for(api, body), [text(api, "ok")])
    assert run.upstream_bodies[0]["parallel_tool_calls"] is False


# --- point 2: non-streaming upstream --------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_streaming_clients_answer_holds_the_text_of_every_turn(api: str) -> None:
    """The driver streams upstream calls and shows each turn's text as it comes (SPEC §8.1):
    the answer and the stored rounds say so."""
    extra: dict[str, Any] = {"stream": True}
    if api == "openai":
        extra["stream_options"] = {"include_usage": True}
    engine = engine_for(api, request(api, **extra))
    first = calls(api, ("c1", "desk_lookup", {"symbol": "X"}))
    if api == "openai":
        first["choices"][0]["message"]["content"] = "Looking. "
    elif api == "responses":
        first["output"].insert(0, rs.message("Looking. ", item_id="msg_0"))
    else:
        first["content"].insert(0, {"type": "text", "text": "Looking. "})
    run = drive(engine, [first, text(api, "ok")])
    assert isinstance(run.commands[0], BeginStream)
    for body in run.upstream_bodies:
        assert body["stream"] is False  # the driver asks for a stream: the engine does no I/O
        assert "stream_options" not in body
    assert engine.conversation.include_usage
    body = run.response.body
    if api == "openai":
        assert body["choices"][0]["message"]["content"] == "Looking. ok"
    elif api == "responses":
        assert [i["content"][0]["text"] for i in body["output"]] == ["Looking. ", "ok"]
    else:
        assert body["content"] == [{"type": "text", "text": t} for t in ("Looking. ", "ok")]
    # Responses remembers the rounds under two keys: the answer's echo and its item reference.
    (remembered,) = run.of(Remember)
    assert len(remembered.keys) == (2 if api == "responses" else 1)
    answer = engine.codec.answer_message(engine.codec.parse_response(text(api, "ok")))
    assert remembered.messages[-1] == answer


# --- point 3: managed calls ----------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_invalid_arguments_become_error_results_and_valid_calls_run(api: str) -> None:
    bad = "{not json" if api == "openai" else {"symbol": 5}
    run = drive(
        engine_for(api, request(api)),
        [
            calls(api, ("c1", "desk_lookup", bad), ("c2", "desk_lookup", {"symbol": "AAPL"})),
            text(api, "ok"),
        ],
    )
    assert [e.checked.arguments for e in run.executions] == [{"symbol": "AAPL"}]
    first, second = results_of(api, run.upstream_bodies[1])
    assert first["ok"] is False and first["error"]["code"] == "invalid_arguments"
    assert second == {"ok": True, "status": 200, "data": {"symbol": "AAPL"}}


def test_openai_results_are_one_tool_message_per_call() -> None:
    run = drive(
        engine_for("openai", request("openai")),
        [
            calls(
                "openai",
                ("a", "desk_lookup", {"symbol": "A"}),
                ("b", "desk_lookup", {"symbol": "B"}),
            ),
            text("openai", "ok"),
        ],
    )
    messages = run.upstream_bodies[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert [m["tool_call_id"] for m in messages[2:]] == ["a", "b"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["a", "b"]


def test_anthropic_results_of_a_round_share_one_user_message() -> None:
    failing = ToolOutcome(
        envelope={"ok": False, "error": {"code": "http_500", "message": "boom"}, "status": 500},
        error_code="http_500",
        status=500,
        executed=True,
        latency_ms=1,
    )
    run = drive(
        engine_for("anthropic", request("anthropic")),
        [
            calls(
                "anthropic",
                ("a", "desk_lookup", {"symbol": "A"}),
                ("b", "desk_lookup", {"symbol": "B"}),
            ),
            text("anthropic", "ok"),
        ],
        tools=lambda e: failing if e.checked.arguments["symbol"] == "B" else ok("fine"),
    )
    messages = run.upstream_bodies[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    blocks = messages[2]["content"]
    assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in blocks] == [
        ("tool_result", "a", False),
        ("tool_result", "b", True),
    ]
    assert orjson.loads(blocks[1]["content"])["error"]["code"] == "http_500"


# --- points 4 and 6: runner calls, unknown names, other agents' tools -----------------------


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", ["my_local_tool", "hallucinated_tool", "ops_restart"])
def test_calls_the_sidecar_does_not_own_go_back_to_the_runner(api: str, name: str) -> None:
    other_agent_tool = tool("ops.restart")
    assert other_agent_tool.presented == "ops_restart"  # granted to someone else, not here
    reply = calls(api, ("c1", name, {"x": 1}))
    body = request(api, tools=[runner_tool(api, "my_local_tool")])
    run = drive(engine_for(api, body), [reply])
    assert run.executions == []
    assert run.response.body == as_answered(api, reply, body, reply["usage"])
    assert run.of(Remember) == []


# --- point 5: mixed responses ---------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_mixed_response_is_refused_without_executing_anything(api: str) -> None:
    engine = engine_for(api, request(api, tools=[runner_tool(api, "local")]))
    run = drive(
        engine, [calls(api, ("m1", "desk_trade", {"symbol": "X", "qty": 1}), ("r1", "local", {}))]
    )
    assert run.executions == []
    failure = run.failure
    assert (failure.status, failure.code) == (502, "mixed_executor_response")
    assert "desk_trade (m1)" in failure.message and "local (r1)" in failure.message
    traced = engine.rounds[0]
    assert [(c.outcome.executed, c.outcome.error_code) for c in traced] == [
        (False, "mixed_executor_response")
    ] * 2


@pytest.mark.parametrize("api", APIS)
def test_on_mixed_retry_answers_every_call_not_executed_and_asks_once_more(api: str) -> None:
    mixed = calls(api, ("m1", "desk_trade", {"symbol": "X", "qty": 1}), ("r1", "local", {}))
    build = agent(on_mixed="retry")
    body = request(api, tools=[runner_tool(api, "local")])
    run = drive(engine_for(api, body, build), [mixed, text(api, "sorry")])
    assert run.executions == []
    results = results_of(api, run.upstream_bodies[1])
    assert [r["error"]["code"] for r in results] == ["mixed_executor_response"] * 2
    assert "separate turns" in results[0]["error"]["message"]
    assert run.response.body["usage"]
    # A second mixed response is refused.
    again = drive(engine_for(api, body, build), [mixed, mixed])
    assert again.failure.code == "mixed_executor_response"
    assert len(again.upstream_bodies) == 2


# --- point 9: concurrency -------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_rounds_run_concurrently_only_when_every_call_is_read_only(api: str) -> None:
    read_only = calls(
        api, ("a", "desk_lookup", {"symbol": "A"}), ("b", "desk_lookup", {"symbol": "B"})
    )
    mixed = calls(
        api, ("c", "desk_lookup", {"symbol": "C"}), ("d", "desk_trade", {"symbol": "D", "qty": 1})
    )
    run = drive(engine_for(api, request(api)), [read_only, mixed, text(api, "ok")])
    first, second = run.of(ExecuteTools)
    assert first.concurrent is True
    assert second.concurrent is False
    assert [e.call.id for e in second.executions] == ["c", "d"]


# --- point 10: duplicates -------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_identical_read_only_calls_are_served_from_the_earlier_result(api: str) -> None:
    same = ("desk_lookup", {"symbol": "AAPL"})
    reordered = '{ "symbol" : "AAPL" }' if api == "openai" else {"symbol": "AAPL"}
    run = drive(
        engine_for(api, request(api)),
        [
            calls(api, ("a", *same), ("b", *same)),
            calls(api, ("c", "desk_lookup", reordered)),
            text(api, "ok"),
        ],
        tools=lambda e: ok({"price": 1}),
    )
    assert [e.call.id for e in run.executions] == ["a"]
    assert results_of(api, run.upstream_bodies[2]) == [
        {"ok": True, "status": 200, "data": {"price": 1}}
    ]


@pytest.mark.parametrize("api", APIS)
def test_identical_destructive_calls_are_refused_never_executed_twice(api: str) -> None:
    trade = ("desk_trade", {"symbol": "AAPL", "qty": 1})
    engine = engine_for(api, request(api))
    run = drive(
        engine,
        [calls(api, ("a", *trade), ("b", *trade)), calls(api, ("c", *trade)), text(api, "ok")],
    )
    assert [e.call.id for e in run.executions] == ["a"]
    assert results_of(api, run.upstream_bodies[1])[1]["error"]["code"] == "duplicate_call"
    assert results_of(api, run.upstream_bodies[2])[0]["error"]["code"] == "duplicate_call"


def test_identical_idempotent_calls_reuse_the_result() -> None:
    run = drive(
        engine_for("openai", request("openai")),
        [
            calls("openai", ("a", "desk_cancel", {})),
            calls("openai", ("b", "desk_cancel", {})),
            text("openai", "ok"),
        ],
    )
    assert [e.call.id for e in run.executions] == ["a"]
    assert results_of("openai", run.upstream_bodies[2])[0]["ok"] is True
    assert CANCEL.effect is Effect.IDEMPOTENT


# --- point 11: budgets ----------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_after_max_rounds_tools_are_withdrawn_for_one_final_call(api: str) -> None:
    lookups = [calls(api, (f"c{i}", "desk_lookup", {"symbol": f"S{i}"})) for i in range(3)]
    engine = engine_for(api, request(api), agent(max_rounds=2))
    run = drive(engine, [*lookups[:2], text(api, "final")])
    assert len(run.executions) == 2
    # The call right after the last allowed round already has tools withdrawn: no model call
    # is spent on calls that would only be refused.
    assert len(run.upstream_bodies) == 3
    final = run.upstream_bodies[-1]
    assert final["tool_choice"] in ("none", {"type": "none"})
    assert [r["ok"] for r in results_of(api, final)] == [True]
    assert run.response.body["usage"]
    # Still calling tools on the final call: 502 tool_budget_exhausted, nothing more runs.
    stubborn = drive(engine_for(api, request(api), agent(max_rounds=2)), lookups)
    assert (stubborn.failure.status, stubborn.failure.code) == (502, "tool_budget_exhausted")
    assert len(stubborn.executions) == 2


@pytest.mark.parametrize("api", APIS)
def test_at_ninety_percent_of_the_total_budget_tools_are_withdrawn(api: str) -> None:
    clock = Clock()
    build = agent(total_timeout_ms=10000, timeout_per_tool_ms=5000)

    def slow_tool(execution: Any) -> ToolOutcome:
        clock.now += 9.5
        return ok()

    engine = engine_for(api, request(api), build)
    run = drive(
        engine,
        [calls(api, ("c1", "desk_lookup", {"symbol": "A"})), text(api, "final")],
        tools=slow_tool,
        clock=clock,
    )
    assert run.of(ExecuteTools)[0].timeout_s == 5.0
    assert run.upstream_bodies[-1]["tool_choice"] in ("none", {"type": "none"})
    # Model time is not tool time: each model call keeps the provider's own timeout.
    assert run.of(CallModel)[-1].timeout_s == MODEL_TIMEOUT_S
    assert run.response


@pytest.mark.parametrize("api", APIS)
def test_the_whole_request_is_bounded_by_total_timeout(api: str) -> None:
    clock = Clock()
    build = agent(total_timeout_ms=10000, timeout_per_tool_ms=10000)

    def too_slow(execution: Any) -> ToolOutcome:
        clock.now += 11
        return ok()

    run = drive(
        engine_for(api, request(api), build),
        [calls(api, ("c1", "desk_lookup", {"symbol": "A"}))],
        tools=too_slow,
        clock=clock,
    )
    assert (run.failure.status, run.failure.code) == (504, "timeout")


# --- point 12: usage ------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_usage_is_summed_over_every_upstream_call(api: str) -> None:
    engine = engine_for(api, request(api))
    run = drive(
        engine,
        [
            calls(api, ("a", "desk_lookup", {"symbol": "A"}), tokens=100),
            calls(api, ("b", "desk_lookup", {"symbol": "B"}), tokens=200),
            text(api, "ok", tokens=300),
        ],
    )
    usage = run.response.body["usage"]
    if api == "openai":
        assert usage == {"prompt_tokens": 600, "completion_tokens": 7, "total_tokens": 607}
    elif api == "responses":
        assert usage | {"input_tokens": 600, "output_tokens": 7, "total_tokens": 607} == usage
    else:
        assert usage == {"input_tokens": 600, "output_tokens": 7}
    assert (engine.usage.input_tokens, engine.usage.output_tokens) == (600, 7)


# --- upstream failures ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [
        (ModelFailed("status", "bad param", 400), 400, "upstream_error"),
        (ModelFailed("status", "slow down", 429), 429, "upstream_error"),
        (ModelFailed("status", "bad key", 401), 502, "upstream_error"),
        (ModelFailed("status", "overloaded", 529), 502, "upstream_error"),
        (ModelFailed("timeout", "no answer"), 504, "upstream_timeout"),
        (ModelFailed("unreachable", "refused"), 502, "upstream_unreachable"),
        (ModelFailed("protocol", "garbage"), 502, "upstream_protocol_error"),
    ],
)
@pytest.mark.parametrize("api", APIS)
def test_upstream_failures_mid_loop_map_to_client_errors(
    api: str, failure: ModelFailed, status: int, code: str
) -> None:
    run = drive(
        engine_for(api, request(api)),
        [calls(api, ("a", "desk_lookup", {"symbol": "A"})), failure],
    )
    assert (run.failure.status, run.failure.code) == (status, code)


@pytest.mark.parametrize("api", APIS)
def test_a_malformed_upstream_body_is_a_protocol_error(api: str) -> None:
    run = drive(engine_for(api, request(api)), [{"unexpected": True}])
    assert (run.failure.status, run.failure.code) == (502, "upstream_protocol_error")


@pytest.mark.parametrize("api", APIS)
def test_a_malformed_client_request_is_the_first_and_only_command(api: str) -> None:
    run = drive(engine_for(api, {"model": "x", "messages": "hello"}), [])
    assert len(run.commands) == 1
    assert (run.failure.status, run.failure.code) == (400, "invalid_request")


@pytest.mark.parametrize("api", APIS)
def test_a_body_of_the_wrong_shape_is_a_400_naming_the_protocol(api: str) -> None:
    run = drive(engine_for(api, {"model": "x", "messages": [{"role": "user"}], "tools": [1]}), [])
    assert (run.failure.status, run.failure.code) == (400, "invalid_request")
    assert run.failure.message


# --- point 13: streaming --------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_the_stream_lifecycle_folds_back_into_the_final_body(api: str) -> None:
    engine = engine_for(api, request(api, stream=True))
    turns = [calls(api, ("a", "desk_lookup", {"symbol": "A"})), text(api, "x" * 700)]
    run = drive(engine, turns)
    codec = codec_of(api)
    sent = client_bytes(codec, engine.conversation, turns, run.response.body)
    assembled = codec.assemble_stream(sent)
    if api == "openai":
        assert assembled["choices"][0]["message"]["content"] == "x" * 700
        assert sent.endswith(b"data: [DONE]\n\n")
    elif api == "responses":
        assert assembled["output"] == run.response.body["output"]
        assert sent.count(b"event: response.created") == 1
        assert sent.rstrip().split(b"\n")[-2:][0] == b"event: response.completed"
    else:
        assert assembled["content"] == run.response.body["content"]
        assert sent.startswith(b"event: message_start\n")
        assert sent.count(b"event: message_start") == 1


# --- point 15: unknown content --------------------------------------------------------------


def test_thinking_and_server_blocks_pass_through_and_stay_in_the_transcript() -> None:
    thinking = {"type": "thinking", "thinking": "let me look", "signature": "sig=="}
    server = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"q": "x"}}
    result = {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": [{"a": 1}]}
    future = {"type": "hologram", "payload": {"z": [1, 2]}}
    first = calls("anthropic", ("c1", "desk_lookup", {"symbol": "A"}))
    first["content"] = [thinking, server, result, *first["content"]]
    final = text("anthropic", "answer")
    final["content"] = [{"type": "redacted_thinking", "data": "opaque"}, future, *final["content"]]
    engine = engine_for("anthropic", request("anthropic", stream=True))
    run = drive(engine, [first, final])
    assert run.upstream_bodies[1]["messages"][1]["content"][:3] == [thinking, server, result]
    assert run.response.body["content"][:2] == [
        {"type": "redacted_thinking", "data": "opaque"},
        future,
    ]
    codec = codec_of("anthropic")
    sent = client_bytes(codec, engine.conversation, [first, final], run.response.body)
    assert codec.assemble_stream(sent)["content"] == final["content"]


@pytest.mark.parametrize("api", APIS)
def test_a_round_with_a_long_running_tool_waits_up_to_the_tool_budget(api: str) -> None:
    """``x-claw.long-running`` (SPEC §22): its call's timeout is what is left of the request's
    tool budget, not the tool timeout; every other call keeps the tool timeout."""
    report = tool(
        "desk.report",
        schema={"type": "object", "properties": {"symbol": {"type": "string"}}},
        annotations={"readOnlyHint": True},
        long_running=True,
    )
    build = agent(LOOKUP, report, total_timeout_ms=60000, timeout_per_tool_ms=5000)
    script = [
        calls(api, ("c1", "desk_report", {"symbol": "A"})),
        calls(api, ("c2", "desk_lookup", {"symbol": "A"})),
        text(api, "final"),
    ]
    run = drive(engine_for(api, request(api), build), script, clock=Clock())
    timeouts = [[c.call_timeout_s(e) for e in c.executions] for c in run.of(ExecuteTools)]
    assert timeouts == [[60.0], [5.0]]
