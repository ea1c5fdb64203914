"""Codec round-trips over every recorded provider exchange in the shared fixtures."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from clawpod.sidecar.model.conversation import CodecError, Conversation
from tests.mediation.scripted import messages_field
from tests.support import responses as rs
from tests.support.codecs import EVERY_API, codec_of
from tests.support.upstream import Recorded, fixture_files, load_fixture

EXCHANGES = [exchange for name in fixture_files() for exchange in load_fixture(name)]
SUCCESSES = [e for e in EXCHANGES if e.status == 200]
ERRORS = [e for e in EXCHANGES if e.status != 200]
REQUESTS = [e for e in EXCHANGES if e.request is not None]


def label(exchange: Recorded) -> str:
    return f"{exchange.source}#{exchange.turn}"


def body_of(exchange: Recorded) -> dict[str, Any]:
    codec = codec_of(exchange.api)
    return codec.assemble_stream(exchange.body) if exchange.stream else exchange.json


def streaming_conversation(api: str) -> Conversation:
    body: dict[str, Any] = {"model": "m", messages_field(api): [{"role": "user", "content": "hi"}]}
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    return codec_of(api).parse_request(body)


def wire_calls(api: str, body: dict[str, Any]) -> list[tuple[str, str, Any]]:
    if api == "openai":
        message = body["choices"][0]["message"]
        legacy = message.get("function_call")
        if legacy:
            return [("call_legacy_0", legacy["name"], orjson.loads(legacy["arguments"]))]
        return [
            (c["id"], c["function"]["name"], orjson.loads(c["function"]["arguments"] or "{}"))
            for c in message.get("tool_calls") or []
        ]
    return [(b["id"], b["name"], b["input"]) for b in body["content"] if b["type"] == "tool_use"]


def test_the_fixtures_are_all_found() -> None:
    assert len(fixture_files()) >= 30
    assert len(SUCCESSES) >= 30 and len(ERRORS) >= 5


@pytest.mark.parametrize("exchange", SUCCESSES, ids=label)
def test_every_recorded_response_parses_into_tool_calls(exchange: Recorded) -> None:
    codec = codec_of(exchange.api)
    body = body_of(exchange)
    turn = codec.parse_response(body)
    expected = wire_calls(exchange.api, body)
    assert [(c.id, c.name) for c in turn.calls] == [(i, n) for i, n, _ in expected]
    assert all(c.id and c.name for c in turn.calls)
    for call, (_, _, arguments) in zip(turn.calls, expected, strict=True):
        parsed = (
            orjson.loads(call.arguments or "{}")
            if isinstance(call.arguments, str)
            else call.arguments
        )
        assert parsed == arguments
    if "usage" in body:
        assert turn.usage == body["usage"]


@pytest.mark.parametrize("exchange", SUCCESSES, ids=label)
def test_every_recorded_response_restreams_as_one_lifecycle_that_folds_back(
    exchange: Recorded,
) -> None:
    codec = codec_of(exchange.api)
    body = body_of(exchange)
    frames = codec.render_stream(streaming_conversation(exchange.api), body)
    again = codec.assemble_stream(b"".join(frames))
    assert wire_calls(exchange.api, again) == wire_calls(exchange.api, body)
    if exchange.api == "openai":
        original, folded = body["choices"][0], again["choices"][0]
        assert folded["message"]["content"] == original["message"].get("content")
        assert folded["finish_reason"] == (original["finish_reason"] or "stop")
        assert again.get("usage") == body.get("usage")
        assert frames[-1] == b"data: [DONE]\n\n"
    else:
        assert again["content"] == body["content"]
        assert (again["stop_reason"], again["usage"]) == (body["stop_reason"], body["usage"])
        assert frames[0].startswith(b"event: message_start\n")
        assert frames[-1].startswith(b"event: message_stop\n")


@pytest.mark.parametrize("exchange", ERRORS, ids=label)
def test_recorded_provider_errors_yield_their_message(exchange: Recorded) -> None:
    message = codec_of(exchange.api).provider_error_message(exchange.body)
    assert message and message == exchange.json["error"]["message"]


@pytest.mark.parametrize("exchange", REQUESTS, ids=label)
def test_recorded_requests_render_back_unchanged_without_managed_tools(
    exchange: Recorded,
) -> None:
    codec = codec_of(exchange.api)
    original = exchange.request
    assert original is not None
    conversation = codec.parse_request(original)
    rendered = codec.render_request(
        conversation, conversation.messages, [], conversation.tool_choice
    )
    if conversation.legacy_functions:
        assert [t["function"] for t in rendered["tools"]] == original["functions"]
        assert "functions" not in rendered and "function_call" not in rendered
        return
    expected = {k: v for k, v in original.items() if k not in ("stream", "stream_options")}
    expected.setdefault("tools", [])
    assert {k: v for k, v in rendered.items() if k != "stream"} == expected
    assert rendered["stream"] is False


def test_openrouter_quirks_fold_into_one_call_that_asks_for_tools() -> None:
    (exchange,) = load_fixture("derived/openrouter_kimi_stream_quirks.turn1.sse")
    body = codec_of("openai").assemble_stream(exchange.body)
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"] == [
        {"id": "0", "type": "function", "function": {"name": "llm_version", "arguments": "{}"}}
    ]


def test_escaped_quotes_split_across_fragments_survive_assembly() -> None:
    name = "anthropic/stream_tool_use_escaped_quotes_sonnet-4-5.vercel-ai.chunks.jsonl"
    (exchange,) = load_fixture(name)
    turn = codec_of("anthropic").parse_response(body_of(exchange))
    assert '"' in orjson.dumps(turn.calls[0].arguments).decode().replace('\\"', '"')
    assert isinstance(turn.calls[0].arguments, dict)


def test_thinking_with_signature_is_kept_for_the_next_round() -> None:
    name = "anthropic/nonstream_thinking_text_tool_use.pydantic-ai.yaml"
    first, second = load_fixture(name)
    codec = codec_of("anthropic")
    turn = codec.parse_response(first.json)
    from clawpod.sidecar.model.conversation import ToolResult
    from tests.mediation.scripted import ok

    assistant, results = codec.round_messages(turn, [ToolResult(turn.calls[0], ok("Mexico"))])
    assert second.request is not None
    assert assistant == second.request["messages"][1]
    assert results["content"][0]["tool_use_id"] == turn.calls[0].id


@pytest.mark.parametrize(
    "name",
    [
        "derived/openai_stream_tool_call.turn1.sse",
        "derived/anthropic_stream_tool_use_no_args.turn1.sse",
    ],
)
def test_a_cut_stream_is_refused_not_folded_into_a_partial_answer(name: str) -> None:
    (exchange,) = load_fixture(name)
    codec = codec_of(exchange.api)
    assert codec.assemble_stream(exchange.body)
    end = b"data: [DONE]" if exchange.api == "openai" else b"event: message_stop"
    cut = exchange.body[: exchange.body.index(end)]
    with pytest.raises(CodecError, match="ended before"):
        codec.assemble_stream(cut)


# U+2028/U+2029 and NEL are line breaks to str.splitlines() but plain text to SSE, and JSON
# carries them unescaped.
UNICODE_BREAKS = "one\u2028two\u2029three\x85four"


@pytest.mark.parametrize("api", EVERY_API)
def test_unicode_line_separators_in_streamed_text_do_not_split_the_event(api: str) -> None:
    if api == "responses":
        body = rs.response(rs.message(UNICODE_BREAKS))
    elif api == "openai":
        message = {"role": "assistant", "content": UNICODE_BREAKS}
        body: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    else:
        body = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [{"type": "text", "text": UNICODE_BREAKS}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    codec = codec_of(api)
    frames = codec.render_stream(streaming_conversation(api), body)
    assembled = codec.assemble_stream(b"".join(frames))
    if api == "responses":
        assert assembled["output"][0]["content"][0]["text"] == UNICODE_BREAKS
    elif api == "openai":
        assert assembled["choices"][0]["message"]["content"] == UNICODE_BREAKS
    else:
        assert assembled["content"][0]["text"] == UNICODE_BREAKS
