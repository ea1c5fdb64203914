"""Streams as real local servers send them (contract §7.4), through a mediated pod, driven by
the real ``openai`` SDK: every field a compatible server may leave out is read leniently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from clawpod.sidecar.model.conversation import CodecError
from tests.mediation.conftest import Sidecar
from tests.support.codecs import codec_of
from tests.support.local_servers import LlamaServer, call, say
from tests.support.services import ToolService

RESPONSES = "/v1/responses"
ASK = "Compare AAPL and MSFT."


async def test_llama_server_responses_stream_through_two_tool_rounds(
    sidecar_for: Sidecar, service: ToolService
) -> None:
    script = (
        call("desk_quote", symbol="AAPL"),
        call("desk_quote", symbol="MSFT"),
        say("AAPL is 1 and MSFT is 2."),
    )
    async with LlamaServer(*script) as server:
        sidecar, token = await sidecar_for(server)
        client = openai.AsyncOpenAI(base_url=sidecar.openai_base_url, api_key=token, max_retries=0)
        async with client, client.responses.stream(model="local-model", input=ASK) as stream:
            text = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
        sent = server.requests_to(RESPONSES)
    assert "".join(text) == "AAPL is 1 and MSFT is 2."
    assert final.output_text == "AAPL is 1 and MSFT is 2."
    assert [r.path for r in service.requests] == ["/quotes/AAPL", "/quotes/MSFT"]
    assert [s.streamed for s in sent] == [True, True, True]
    # Each round's result went back under the call id the server gave it.
    outputs = [i for i in sent[1].body["input"] if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["fc_call_0"]


# --- the shapes local servers send, folded in pieces of every size ----------------------------

SHAPES = Path(__file__).resolve().parents[1] / "fixtures" / "local_servers"


def fold(api: str, name: str, size: int) -> tuple[dict[str, Any], str]:
    """The whole turn and the text handed out, fed ``size`` bytes at a time."""
    data = (SHAPES / name).read_bytes()
    assembler = codec_of(api).stream_assembler()
    shown = ""
    for start in range(0, len(data), size):
        shown += "".join(d.text for d in assembler.feed(data[start : start + size]))
    return assembler.finish(), shown


def chat_calls(body: dict[str, Any]) -> list[tuple[str, str, Any]]:
    message = body["choices"][0]["message"]
    return [
        (c["id"], c["function"]["name"], orjson.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]


SIZES = [1, 5, 4096]


@pytest.mark.parametrize("size", SIZES)
def test_llama_cpp_python_text_stream_without_usage(size: int) -> None:
    body, shown = fold("openai", "llama_cpp_python.chat_text.sse", size)
    assert shown == body["choices"][0]["message"]["content"] == "AAPL is 1."
    assert "usage" not in body


@pytest.mark.parametrize("size", SIZES)
def test_llama_cpp_python_repeated_id_and_legacy_mirror_make_one_call(size: int) -> None:
    body, _ = fold("openai", "llama_cpp_python.chat_named_tool.sse", size)
    assert chat_calls(body) == [("call__0_desk_quote_cmpl-3f2b", "desk_quote", {"symbol": "AAPL"})]
    assert codec_of("openai").parse_response(body).calls[0].name == "desk_quote"


def test_llama_cpp_python_empty_stream_has_no_event() -> None:
    assembler = codec_of("openai").stream_assembler()
    assembler.feed((SHAPES / "llama_cpp_python.chat_auto_tools_empty.sse").read_bytes())
    with pytest.raises(CodecError, match="no chunks"):
        assembler.finish()
    assert assembler.events == 0


@pytest.mark.parametrize("size", SIZES)
def test_vllm_two_calls_named_first(size: int) -> None:
    body, _ = fold("openai", "vllm.chat_tool_calls.sse", size)
    assert chat_calls(body) == [
        ("chatcmpl-tool-a1", "desk_quote", {"symbol": "AAPL"}),
        ("chatcmpl-tool-b2", "desk_quote", {"symbol": "MSFT"}),
    ]
    assert body["usage"]["total_tokens"] == 262


@pytest.mark.parametrize("size", SIZES)
def test_ollama_calls_numbered_zero_stay_two_calls(size: int) -> None:
    body, _ = fold("openai", "ollama.chat_tool_calls.sse", size)
    assert chat_calls(body) == [
        ("call_u1v2", "desk_quote", {"symbol": "AAPL"}),
        ("call_w3x4", "desk_quote", {"symbol": "MSFT"}),
    ]
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def chat_stream(*deltas: dict[str, Any]) -> bytes:
    chunks = [{"id": "c", "choices": [{"index": 0, "delta": delta}]} for delta in deltas]
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def test_calls_without_index_or_with_one_index_in_one_chunk_stay_apart() -> None:
    quote = {"type": "function", "function": {"name": "desk_quote", "arguments": "{}"}}
    no_index = chat_stream({"tool_calls": [{"id": "a", **quote}, {"id": "b", **quote}]})
    same_index = chat_stream(
        {"tool_calls": [{"id": "a", "index": 0, **quote}]},
        {"tool_calls": [{"id": "b", "index": 0, **quote}]},
    )
    for data in (no_index, same_index):
        body = codec_of("openai").assemble_stream(data)
        assert [c[0] for c in chat_calls(body)] == ["a", "b"]


def test_fragments_without_index_or_id_continue_the_last_call() -> None:
    data = chat_stream(
        {"tool_calls": [{"id": "a", "function": {"name": "desk_quote", "arguments": '{"sym'}}]},
        {"tool_calls": [{"function": {"arguments": 'bol": "X"}'}}]},
    )
    body = codec_of("openai").assemble_stream(data)
    assert chat_calls(body) == [("a", "desk_quote", {"symbol": "X"})]


@pytest.mark.parametrize("size", SIZES)
def test_llama_server_responses_text_without_indexes(size: int) -> None:
    body, shown = fold("responses", "llama_server.responses_text.sse", size)
    assert shown == "AAPL is 1."
    assert body["output"][0]["content"][0]["text"] == "AAPL is 1."


@pytest.mark.parametrize("size", SIZES)
def test_llama_server_responses_call_without_item_id(size: int) -> None:
    body, _ = fold("responses", "llama_server.responses_call.sse", size)
    calls = codec_of("responses").parse_response(body).calls
    assert [(c.id, c.name, orjson.loads(c.arguments)) for c in calls] == [
        ("fc_Xk2p", "desk_quote", {"symbol": "AAPL"})
    ]


def test_responses_events_without_indexes_keep_their_items_apart() -> None:
    """Two messages, neither numbered: each delta goes to the item its item_id names."""
    events = [
        {"type": "response.created", "response": {"id": "r"}},
        {"type": "response.output_item.added", "item": {"type": "message", "id": "m1"}},
        {"type": "response.output_item.added", "item": {"type": "message", "id": "m2"}},
        {"type": "response.output_text.delta", "item_id": "m1", "delta": "one"},
        {"type": "response.output_text.delta", "item_id": "m2", "delta": "two"},
        {"type": "response.completed", "response": {"id": "r", "output": []}},
    ]
    data = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    assembler = codec_of("responses").stream_assembler()
    deltas = assembler.feed(data)
    assert [(d.part, d.item_id, d.text) for d in deltas] == [
        ((0, 0), "m1", "one"),
        ((1, 0), "m2", "two"),
    ]
