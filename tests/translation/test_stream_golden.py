"""Stream translation golden tests (contract §18): every recorded stream, translated to each
other protocol whole and in 1-byte, 7-byte and 4 KiB pieces, comes out the same, and the real
SDK of the caller's protocol parses it into the answer the recording holds (text, calls with
their ids, names and arguments, stop reason, usage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

from clawpod.sidecar.codecs.parts import unwrap_carried
from clawpod.sidecar.codecs.sse import parse_events
from clawpod.sidecar.translation.streams import stream_translator
from tests.support import responses as scripted_responses
from tests.support.codecs import codec_of
from tests.support.upstream import FIXTURES_DIR, Reply, StubUpstream, load_fixture

LOCAL = Path(__file__).resolve().parents[1] / "fixtures" / "local_servers"
PIECES = (1, 7, 4096)
API_OF = {"chat": "openai", "messages": "anthropic", "responses": "responses"}


def _recorded(name: str, turn: int) -> bytes:
    return load_fixture(name)[turn].body


def _scripted_responses(*output: dict[str, Any], **fields: Any) -> bytes:
    return scripted_responses.sse(scripted_responses.response(*output, **fields))


# (protocol of the stream, a name, its bytes)
SOURCES: list[tuple[str, str, bytes]] = [
    ("chat", name, (FIXTURES_DIR / "derived" / name).read_bytes())
    for name in (
        "openai_stream_tool_call.turn1.sse",
        "openai_stream_tool_call.turn2.sse",
        "openai_stream_parallel_tool_calls.turn1.sse",
        "openai_stream_parallel_tool_calls.turn3.sse",
        "openrouter_kimi_stream_quirks.turn1.sse",
        "openrouter_kimi_stream_quirks.turn2.sse",
    )
]
SOURCES += [
    (
        "chat",
        "simonw-llm multiply loop turn 1",
        _recorded("openai/stream_tool_loop_raw_gpt-4o-mini.simonw-llm.yaml", 0),
    ),
    (
        "chat",
        "simonw-llm multiply loop turn 2",
        _recorded("openai/stream_tool_loop_raw_gpt-4o-mini.simonw-llm.yaml", 1),
    ),
]
SOURCES += [
    ("chat", name, (LOCAL / name).read_bytes())
    for name in (
        "llama_cpp_python.chat_text.sse",
        "llama_cpp_python.chat_named_tool.sse",
        "vllm.chat_tool_calls.sse",
        "ollama.chat_tool_calls.sse",
    )
]
SOURCES += [
    ("messages", name, (FIXTURES_DIR / "derived" / name).read_bytes())
    for name in (
        "anthropic_stream_parallel_tool_use.turn1.sse",
        "anthropic_stream_parallel_tool_use.turn2.sse",
        "anthropic_stream_tool_use_no_args.turn1.sse",
        "anthropic_stream_tool_use_no_args.turn2.sse",
    )
]
SOURCES += [
    ("messages", name, _recorded(f"anthropic/{name}", 0))
    for name in (
        "stream_tool_use_input_json_delta.vercel-ai.chunks.jsonl",
        "stream_tool_use_escaped_quotes_sonnet-4-5.vercel-ai.chunks.jsonl",
        "stream_text_then_tool_use_no_args.vercel-ai.chunks.jsonl",
        "stream_server_tool_blocks_then_tool_use.pydantic-ai.yaml",
    )
]
SOURCES += [
    ("responses", name, (LOCAL / name).read_bytes())
    for name in ("llama_server.responses_text.sse", "llama_server.responses_call.sse")
]
SOURCES += [
    (
        "responses",
        "scripted reasoning, text, two calls",
        _scripted_responses(
            scripted_responses.reasoning("rs_1", encrypted="opaque", summary="thinking"),
            scripted_responses.message("Let me look both up.", "msg_1"),
            scripted_responses.call("call_a", "quote", {"symbol": "AAPL"}),
            scripted_responses.call("call_b", "quote", {"symbol": 'MS"FT'}),
            input_tokens=40,
            output_tokens=12,
        ),
    ),
    (
        "responses",
        "scripted cut at max_output_tokens",
        _scripted_responses(
            scripted_responses.message("Partial ans", "msg_1"),
            status="incomplete",
            incomplete_details={"reason": "max_output_tokens"},
        ),
    ),
]
CASES = [
    pytest.param(source, caller, data, id=f"{source}->{caller}:{name}")
    for source, name, data in SOURCES
    for caller in API_OF
    if caller != source
]


def translate(source: str, caller: str, data: bytes, size: int | None) -> bytes:
    translator = stream_translator(
        source,
        codec_of(API_OF[caller]),
        provider="recorded",
        model="asked-model",
        include_usage=True,
    )
    step = size or max(len(data), 1)
    out = b"".join(translator.feed(data[i : i + step]) for i in range(0, len(data), step))
    return out + translator.finish()


# --- what the recording holds, read by the sidecar's own assembler -----------------------------


def expected(source: str, data: bytes) -> dict[str, Any]:
    body = codec_of(API_OF[source]).assemble_stream(data)
    if source == "chat":
        message = body["choices"][0]["message"]
        calls = [
            (c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in message.get("tool_calls") or []
        ]
        return {"text": message.get("content") or "", "calls": calls}
    if source == "messages":
        blocks = body["content"]
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
        calls = [
            (b["id"], b["name"], orjson.dumps(b.get("input") or {}).decode())
            for b in blocks
            if b["type"] == "tool_use"
        ]
        return {"text": text, "calls": calls}
    items = body["output"]
    text = "".join(
        p.get("text", "") for i in items if i["type"] == "message" for p in i.get("content", [])
    )
    calls = [
        (i["call_id"], i["name"], i.get("arguments") or "")
        for i in items
        if i["type"] == "function_call"
    ]
    return {"text": text, "calls": calls}


def _same_arguments(got: Any, want: str) -> bool:
    parsed_want = orjson.loads(want) if want.strip() else {}
    parsed_got = orjson.loads(got) if isinstance(got, str) else got
    return parsed_got == parsed_want


# --- what the caller's real SDK makes of the translation ---------------------------------------


async def messages_final(stream: bytes) -> anthropic.types.Message:
    """``stream`` as the anthropic SDK's MessageStream reads it to its final message."""
    async with StubUpstream() as upstream:
        upstream.enqueue("anthropic", Reply.sse(stream))
        claude = anthropic.AsyncAnthropic(
            base_url=upstream.anthropic_url, api_key="k", max_retries=0
        )
        async with (
            claude,
            claude.messages.stream(
                model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            ) as live,
        ):
            return await live.get_final_message()


async def responses_final(stream: bytes) -> openai.types.responses.Response:
    """``stream`` as the openai SDK's Responses stream reads it to its final response."""
    async with StubUpstream() as upstream:
        upstream.enqueue("responses", Reply.sse(stream))
        client = openai.AsyncOpenAI(base_url=upstream.openai_url, api_key="k", max_retries=0)
        async with client, client.responses.stream(model="m", input="hi") as live:
            return await live.get_final_response()


async def sdk_parse(caller: str, stream: bytes) -> dict[str, Any]:
    if caller == "chat":
        async with StubUpstream() as upstream:
            upstream.enqueue("openai", Reply.sse(stream))
            client = openai.AsyncOpenAI(base_url=upstream.openai_url, api_key="k", max_retries=0)
            async with (
                client,
                client.chat.completions.stream(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                ) as chat,
            ):
                async for _ in chat:
                    pass
                # The snapshot, not get_final_completion: that refuses a cut answer outright.
                final = chat.current_completion_snapshot
            choice = final.choices[0]
            calls = [
                (c.id, c.function.name, c.function.arguments)
                for c in choice.message.tool_calls or []
            ]
            usage = final.usage
            return {
                "text": choice.message.content or "",
                "calls": calls,
                "stop": choice.finish_reason,
                "input_tokens": usage.prompt_tokens if usage else None,
            }
    if caller == "responses":
        final = await responses_final(stream)
        calls = [
            (i.call_id, i.name, i.arguments) for i in final.output if i.type == "function_call"
        ]
        usage = final.usage
        return {
            "text": final.output_text,
            "calls": calls,
            "stop": final.status,
            "input_tokens": usage.input_tokens if usage else None,
        }
    message = await messages_final(stream)
    text = "".join(b.text for b in message.content if b.type == "text")
    calls = [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"]
    usage = message.usage
    cached = (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    return {
        "text": text,
        "calls": calls,
        "stop": message.stop_reason,
        "input_tokens": usage.input_tokens + cached,
    }


@pytest.mark.parametrize(("source", "caller", "data"), CASES)
async def test_recorded_stream_translates_for_the_callers_sdk(
    source: str, caller: str, data: bytes
) -> None:
    whole = translate(source, caller, data, None)
    for size in PIECES:
        assert translate(source, caller, data, size) == whole, f"{size}-byte pieces differ"
    want = expected(source, data)
    got = await sdk_parse(caller, whole)
    assert got["text"] == want["text"]
    assert [(i, n) for i, n, _ in got["calls"]] == [(i, n) for i, n, _ in want["calls"]]
    for (_, _, arguments), (_, _, wanted) in zip(got["calls"], want["calls"], strict=True):
        assert _same_arguments(arguments, wanted)
    assert got["stop"] == _stop(
        caller, cut="max_output_tokens" in repr(data), calls=bool(want["calls"])
    )
    assert got["input_tokens"] == _input_tokens(source, data)


def _stop(caller: str, *, cut: bool, calls: bool) -> str:
    if caller == "responses":
        return "incomplete" if cut else "completed"
    if caller == "chat":
        return "length" if cut else "tool_calls" if calls else "stop"
    return "max_tokens" if cut else "tool_use" if calls else "end_turn"


def _input_tokens(source: str, data: bytes) -> int:
    """Every input token the recording counted, cached ones included (0 if it counted none)."""
    body = codec_of(API_OF[source]).assemble_stream(data)
    usage = body.get("usage") or {}
    if source == "messages":
        return sum(
            usage.get(k) or 0
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        )
    return usage.get("prompt_tokens" if source == "chat" else "input_tokens") or 0


# --- reasoning: carried opaquely to the protocol that can take it back -------------------------

THINKING_STREAM = b"".join(
    b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    for kind, fields in (
        (
            "message_start",
            {
                "message": {
                    "id": "msg_t",
                    "model": "claude",
                    "content": [],
                    "usage": {"input_tokens": 7, "output_tokens": 1},
                }
            },
        ),
        (
            "content_block_start",
            {"index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        ),
        (
            "content_block_delta",
            {"index": 0, "delta": {"type": "thinking_delta", "thinking": "Quote first."}},
        ),
        (
            "content_block_delta",
            {"index": 0, "delta": {"type": "signature_delta", "signature": "sig-123"}},
        ),
        ("content_block_stop", {"index": 0}),
        ("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "On it."}}),
        ("content_block_stop", {"index": 1}),
        ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
        ("message_stop", {}),
    )
)


async def test_thinking_reaches_a_responses_caller_as_reasoning_it_can_send_back() -> None:
    stream = translate("messages", "responses", THINKING_STREAM, 7)
    final = await responses_final(stream)
    reasoning, message = final.output
    assert reasoning.type == "reasoning" and message.type == "message"
    carried = unwrap_carried(reasoning.encrypted_content)
    assert carried is not None and carried["protocol"] == "messages"
    assert carried["value"] == {
        "type": "thinking",
        "thinking": "Quote first.",
        "signature": "sig-123",
    }
    assert final.output_text == "On it."


async def test_responses_reasoning_reaches_a_messages_caller_as_thinking() -> None:
    source = next(data for _, name, data in SOURCES if name.startswith("scripted reasoning"))
    stream = translate("responses", "messages", source, 1)
    message = await messages_final(stream)
    thinking = message.content[0]
    assert thinking.type == "thinking"
    carried = unwrap_carried(thinking.signature)
    assert carried is not None and carried["value"]["encrypted_content"] == "opaque"
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]


def test_a_chat_caller_gets_no_reasoning() -> None:
    stream = translate("messages", "chat", THINKING_STREAM, None)
    assert b"Quote first" not in stream and b"sig-123" not in stream
    assert b'"content":"On it."' in stream


def test_a_chat_caller_that_did_not_ask_for_usage_gets_no_usage_chunk() -> None:
    """The sidecar asks a Chat provider for usage to charge it; the caller gets the usage
    chunk only when it asked (``stream_options.include_usage``)."""
    source = (
        FIXTURES_DIR / "derived" / "anthropic_stream_parallel_tool_use.turn1.sse"
    ).read_bytes()
    translator = stream_translator(
        "messages", codec_of("openai"), provider="p", model="m", include_usage=False
    )
    stream = translator.feed(source) + translator.finish()
    assert b'"choices":[]' not in stream and b'"usage"' not in stream
    assert stream.endswith(b"data: [DONE]\n\n")


LEGACY_STREAM = (
    b"".join(
        b"data: " + orjson.dumps(chunk) + b"\n\n"
        for chunk in (
            {
                "id": "c1",
                "model": "gpt-3.5-turbo-0613",
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "role": "assistant",
                            "content": None,
                            "function_call": {"name": "get_weather", "arguments": ""},
                        },
                    }
                ],
            },
            {
                "id": "c1",
                "choices": [{"index": 0, "delta": {"function_call": {"arguments": '{"city": '}}}],
            },
            {
                "id": "c1",
                "choices": [{"index": 0, "delta": {"function_call": {"arguments": '"Oslo"}'}}}],
            },
            {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "function_call"}]},
        )
    )
    + b"data: [DONE]\n\n"
)


@pytest.mark.parametrize("caller", ["messages", "responses"])
async def test_a_legacy_function_call_stream_becomes_a_call(caller: str) -> None:
    """A Chat server that streams only the legacy ``function_call`` field (gpt-3.5-0613,
    older compatible servers): the call reaches the caller as a call."""
    got = await sdk_parse(caller, translate("chat", caller, LEGACY_STREAM, 7))
    ((call_id, name, arguments),) = got["calls"]
    assert (call_id, name) == ("call_get_weather", "get_weather")
    assert _same_arguments(arguments, '{"city": "Oslo"}')


CACHED_CHAT_STREAM = (
    b"".join(
        b"data: " + orjson.dumps(chunk) + b"\n\n"
        for chunk in (
            {"id": "c2", "model": "gpt-4o", "choices": [{"index": 0, "delta": {"content": "Hi"}}]},
            {"id": "c2", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {
                "id": "c2",
                "choices": [],
                "usage": {
                    "prompt_tokens": 1200,
                    "completion_tokens": 5,
                    "total_tokens": 1205,
                    "prompt_tokens_details": {"cached_tokens": 1024},
                    "completion_tokens_details": {"reasoning_tokens": 2},
                },
            },
        )
    )
    + b"data: [DONE]\n\n"
)


async def test_cached_tokens_keep_their_meaning_across_a_stream() -> None:
    """OpenAI counts cached input inside ``prompt_tokens``; Messages counts cache reads apart:
    the total input a Messages caller sees is the provider's, its cached share kept."""
    stream = translate("chat", "messages", CACHED_CHAT_STREAM, 1)
    usage = (await messages_final(stream)).usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (176, 1024)
    assert usage.output_tokens == 5
    back = translate("messages", "responses", stream, 7)
    completed = [p for e, p in parse_events(back) if e == "response.completed"]
    told = orjson.loads(completed[0])["response"]["usage"]
    assert (told["input_tokens"], told["input_tokens_details"]["cached_tokens"]) == (1200, 1024)
