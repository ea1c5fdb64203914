"""Mid-stream failover across protocols (SPEC §14, contract §18): a caller's stream translated
from a provider of another protocol that breaks after text goes on at the route's next
target, whatever protocol that one speaks, and reaches the real SDKs as one stream; the same
rules hold as for a stream of the caller's own protocol (never after a tool-call delta, once).

The first streams are recorded answers (the fixtures' text turns), cut after their first text;
the providers are stubs on 127.0.0.1 that answer as the real ones do."""

from __future__ import annotations

import itertools
from typing import Any

import anthropic
import openai
import orjson
import pytest

from clawpod.sidecar.manifest import Provider, RouteTarget
from clawpod.sidecar.server.failover.stream_failover import CONTINUE
from tests.providers.conftest import PodMaker, ProviderPod, Upstreams
from tests.providers.streams import chat_stream_events, messages_stream_events
from tests.support import responses as rs
from tests.support.upstream import FIXTURES_DIR, RESET, Reply

PROTOCOLS = ("chat", "messages", "responses")
ROUTE_OF = {"chat": "openai", "messages": "anthropic", "responses": "responses"}
ASK = "Name two pelicans."
MODEL = "any-model"

# Recorded text answers, and how much of each reached the client before its provider broke.
_RECORDED = FIXTURES_DIR / "derived"
_CHAT_TEXT = (_RECORDED / "openai_stream_tool_call.turn2.sse").read_bytes()
_MESSAGES_TEXT = (_RECORDED / "anthropic_stream_parallel_tool_use.turn2.sse").read_bytes()
SAID = {
    "chat": "The capital",
    "messages": "Here are two great names for your pet pelican:\n\n1. **Charles** - A "
    "sophisticated and dignified name, perfect for a pelican with personality",
    "responses": "one two th",
}
REST = "and the rest."


def _events(body: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in body.replace(b"\r\n", b"\n").split(b"\n\n") if event]


def _responses_events(body: dict[str, Any]) -> list[bytes]:
    return [
        b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
        for kind, payload in rs.sse_events(body)
    ]


def broken_stream(protocol: str) -> list[Any]:
    """A provider's answer cut after the text in ``SAID``."""
    if protocol == "chat":
        return [*_events(_CHAT_TEXT)[:3], RESET]  # the role chunk, "The", " capital"
    if protocol == "messages":
        return [*_events(_MESSAGES_TEXT)[:5], RESET]  # start, block, ping, two text deltas
    first = _responses_events(rs.response(rs.message("one two three four", "msg_a")))
    return [*first[:6], RESET]  # created, in progress, item, part, "one t", "wo th"


def whole_stream(protocol: str, text: str) -> list[bytes]:
    if protocol == "chat":
        return chat_stream_events(text)
    if protocol == "messages":
        return messages_stream_events(text)
    return _responses_events(rs.response(rs.message(text, "msg_b"), response_id="resp_b"))


def providers_for(upstreams: Upstreams, first: str, then: str) -> dict[str, Provider]:
    """``first-<protocol>`` on the primary upstream, ``then-<protocol>`` on the secondary,
    each speaking that protocol alone."""

    def provider(name: str, url: str, key: str) -> Provider:
        if name == "messages":
            return Provider(api="anthropic", base_url=url, key_env=key, models=[])
        return Provider(
            api="openai", base_url=url + "/v1", key_env=key, models=[], protocols=[name]
        )

    return {
        f"first-{first}": provider(first, upstreams.primary.url, "OPENAI_KEY_A"),
        f"then-{then}": provider(then, upstreams.secondary.url, "AZURE_KEY"),
    }


def route(first: str, then: str) -> dict[str, list[RouteTarget]]:
    return {
        MODEL: [
            RouteTarget(provider=f"first-{first}", model=f"{first}-model"),
            RouteTarget(provider=f"then-{then}", model=f"{then}-model"),
        ]
    }


async def crossing_pod(
    make_pod: PodMaker, upstreams: Upstreams, first: str, then: str, **kw: Any
) -> ProviderPod:
    return await make_pod(
        providers=providers_for(upstreams, first, then), routes=route(first, then), **kw
    )


async def streamed_text(pod: ProviderPod, caller: str) -> tuple[str, set[str]]:
    """The answer's text as the caller's SDK read it, and the ids it was told."""
    if caller == "chat":
        chunks = await pod.openai().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": ASK}], stream=True
        )
        got = [chunk async for chunk in chunks]
        text = "".join(c.choices[0].delta.content or "" for c in got if c.choices)
        return text, {c.id for c in got}
    if caller == "messages":
        async with pod.anthropic().messages.stream(
            model=MODEL, max_tokens=256, messages=[{"role": "user", "content": ASK}]
        ) as stream:
            message = await stream.get_final_message()
        assert message.stop_reason == "end_turn"
        return "".join(b.text for b in message.content if b.type == "text"), {message.id}
    stream = await pod.openai().responses.create(model=MODEL, input=ASK, stream=True)
    events = [event async for event in stream]
    (completed,) = [e for e in events if e.type == "response.completed"]
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers))  # numbered as one stream
    items = {e.item_id for e in events if e.type == "response.output_text.delta"}
    assert completed.response.output_text == "".join(
        e.delta for e in events if e.type == "response.output_text.delta"
    )
    return completed.response.output_text, items


# Every (caller, first target, next target) a route allows but three protocols alike.
PAIRS = [
    (caller, first, then)
    for caller, first, then in itertools.product(PROTOCOLS, repeat=3)
    if not caller == first == then
]


@pytest.mark.parametrize(("caller", "first", "then"), PAIRS)
async def test_a_translated_stream_cut_after_text_goes_on_at_the_next_target(
    make_pod: PodMaker, upstreams: Upstreams, caller: str, first: str, then: str
) -> None:
    """Before: a stream translated for its caller, or continued by a target of another
    protocol, ended in the caller's error when its provider broke (#45)."""
    pod = await crossing_pod(make_pod, upstreams, first, then)
    upstreams.primary.enqueue(ROUTE_OF[first], Reply.sse(broken_stream(first)))
    upstreams.secondary.enqueue(ROUTE_OF[then], Reply.sse(whole_stream(then, REST)))
    text, ids = await streamed_text(pod, caller)
    said = SAID[first]
    assert text.startswith(said)
    assert text.rstrip().endswith(REST)
    assert len(ids) == 1  # one answer to the client
    (asked,) = upstreams.secondary.requests_to(ROUTE_OF[then])
    sent = orjson.dumps(asked.json).decode()
    assert orjson.dumps(said.rstrip()).decode()[1:-1] in sent  # the text so far, in its form
    if not (caller == then == "messages"):  # a prefill, where the target speaks Messages
        assert CONTINUE in sent
    assert asked.json["model"] == f"{then}-model"
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "ok"
    assert record["provider"] == f"then-{then}"
    assert record["failover"]["after_text"] == len(said)
    assert (record["failover"]["from"], record["failover"]["to"]) == (
        f"first-{first}",
        f"then-{then}",
    )
    assert record["usage"]["rounds"] == 2


def _chat_tool_delta() -> bytes:
    events = _events(_CHAT_TEXT)
    chunk = orjson.loads(events[1][6:])
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "quote"}}
    chunk["choices"][0]["delta"] = {"tool_calls": [call]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


async def test_a_translated_stream_cut_after_a_tool_call_delta_is_not_continued(
    make_pod: PodMaker, upstreams: Upstreams
) -> None:
    pod = await crossing_pod(make_pod, upstreams, "chat", "messages")
    upstreams.primary.enqueue(
        "openai", Reply.sse([*_events(_CHAT_TEXT)[:3], _chat_tool_delta(), RESET])
    )
    upstreams.secondary.enqueue("anthropic", Reply.sse(messages_stream_events("must not")))
    with pytest.raises(anthropic.APIError):
        await streamed_text(pod, "messages")
    assert upstreams.secondary.received == []
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "error"
    assert "failover" not in record


@pytest.mark.parametrize("caller", ["messages", "chat"])
async def test_a_fallback_that_breaks_too_ends_the_callers_stream_in_its_error(
    make_pod: PodMaker, upstreams: Upstreams, caller: str
) -> None:
    """The stream is continued once: a continuation that breaks is the answer's end."""
    pod = await crossing_pod(make_pod, upstreams, "chat", "messages")
    upstreams.primary.enqueue("openai", Reply.sse(broken_stream("chat")))
    upstreams.secondary.enqueue("anthropic", Reply.sse(broken_stream("messages")))
    error = anthropic.APIError if caller == "messages" else openai.APIError
    with pytest.raises(error):
        await streamed_text(pod, caller)
    assert len(upstreams.primary.received) == 1
    assert len(upstreams.secondary.received) == 1
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "error"
    assert record["failover"]["to"] == "then-messages"


def messages_tool_use_events(name: str = "quote", arguments: Any = None) -> list[bytes]:
    """A Messages answer that is one tool call."""
    events = messages_stream_events("")
    use = {"type": "tool_use", "id": "toolu_9", "name": name, "input": {}}
    json = orjson.dumps({"s": "AAPL"} if arguments is None else arguments).decode()
    arguments = {"type": "input_json_delta", "partial_json": json}

    def event(name: str, payload: dict[str, Any]) -> bytes:
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **payload})

    return [
        events[0],
        event("content_block_start", {"index": 0, "content_block": use}) + b"\n\n",
        event("content_block_delta", {"index": 0, "delta": arguments}) + b"\n\n",
        event("content_block_stop", {"index": 0}) + b"\n\n",
        event(
            "message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}
        )
        + b"\n\n",
        event("message_stop", {}) + b"\n\n",
    ]


@pytest.mark.parametrize("caller", PROTOCOLS)
async def test_a_fallback_that_answers_with_a_tool_call_reaches_the_caller_as_one_answer(
    make_pod: PodMaker, upstreams: Upstreams, caller: str
) -> None:
    """The text so far ends where the fallback's tool call begins: each SDK reads one answer
    of the text and the call (before, a Messages call's block start was dropped as if it
    continued the text, and a Responses call took the open message's place)."""
    pod = await crossing_pod(make_pod, upstreams, "chat", "messages")
    upstreams.primary.enqueue("openai", Reply.sse(broken_stream("chat")))
    upstreams.secondary.enqueue("anthropic", Reply.sse(messages_tool_use_events()))
    said, ask = SAID["chat"], [{"role": "user", "content": ASK}]
    if caller == "messages":
        async with pod.anthropic().messages.stream(
            model=MODEL, max_tokens=256, messages=ask
        ) as stream:
            message = await stream.get_final_message()
        assert [block.type for block in message.content] == ["text", "tool_use"]
        assert message.content[0].text == said  # type: ignore[union-attr]
        assert message.content[1].input == {"s": "AAPL"}  # type: ignore[union-attr]
        assert message.stop_reason == "tool_use"
    elif caller == "chat":
        chunks = await pod.openai().chat.completions.create(model=MODEL, messages=ask, stream=True)
        got = [chunk.choices[0] async for chunk in chunks if chunk.choices]
        assert "".join(choice.delta.content or "" for choice in got) == said
        calls = [call for choice in got for call in choice.delta.tool_calls or ()]
        assert calls[0].function.name == "quote"  # type: ignore[union-attr]
        assert "".join(c.function.arguments or "" for c in calls) == '{"s":"AAPL"}'  # type: ignore[union-attr]
        assert got[-1].finish_reason == "tool_calls"
    else:
        stream = await pod.openai().responses.create(model=MODEL, input=ASK, stream=True)
        events = [event async for event in stream]
        numbers = [e.sequence_number for e in events]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
        (completed,) = [e for e in events if e.type == "response.completed"]
        output = completed.response.output
        assert [item.type for item in output] == ["message", "function_call"]
        assert completed.response.output_text == said
        assert output[1].arguments == '{"s":"AAPL"}'  # type: ignore[union-attr]
        added = [e.output_index for e in events if e.type == "response.output_item.added"]
        assert added == [0, 1]
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "ok"
    assert record["failover"]["to"] == "then-messages"


MEDIATED = [
    ("messages", "messages", "chat"),
    ("messages", "chat", "messages"),
    ("chat", "responses", "chat"),
    ("responses", "chat", "chat"),
]


@pytest.mark.parametrize(("caller", "first", "then"), MEDIATED)
async def test_a_mediated_translated_stream_cut_after_text_goes_on_at_the_next_target(
    make_pod: PodMaker, upstreams: Upstreams, caller: str, first: str, then: str
) -> None:
    pod = await crossing_pod(make_pod, upstreams, first, then, mode="mediated")
    upstreams.primary.enqueue(ROUTE_OF[first], Reply.sse(broken_stream(first)))
    upstreams.secondary.enqueue(ROUTE_OF[then], Reply.sse(whole_stream(then, REST)))
    text, _ = await streamed_text(pod, caller)
    assert text.startswith(SAID[first]) and text.rstrip().endswith(REST)
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "ok"
    assert (record["failover"]["from"], record["failover"]["to"]) == (
        f"first-{first}",
        f"then-{then}",
    )


def _trades(pod: ProviderPod) -> int:
    return sum(1 for r in pod.service.requests if r.path == "/trades")


BUY = {"symbol": "AAPL", "side": "buy", "quantity": 1}


async def test_a_mediated_translated_stream_cut_after_a_tool_call_delta_is_not_continued(
    make_pod: PodMaker, upstreams: Upstreams
) -> None:
    pod = await crossing_pod(make_pod, upstreams, "chat", "messages", mode="mediated")
    upstreams.primary.enqueue(
        "openai", Reply.sse([*_events(_CHAT_TEXT)[:3], _chat_tool_delta(), RESET])
    )
    upstreams.secondary.enqueue("anthropic", Reply.sse(messages_stream_events("must not")))
    with pytest.raises(anthropic.APIError):
        await streamed_text(pod, "messages")
    assert upstreams.secondary.received == []
    assert _trades(pod) == 0
    (record,) = await pod.audit()
    assert "failover" not in record


async def test_a_mediated_fallback_that_answers_with_a_tool_call_runs_it_once(
    make_pod: PodMaker, upstreams: Upstreams
) -> None:
    """The continued turn is one turn of the text and the fallback's call: its tool runs
    once, and the next round is asked of the route's first target again."""
    pod = await crossing_pod(make_pod, upstreams, "chat", "messages", mode="mediated")
    upstreams.primary.enqueue("openai", Reply.sse(broken_stream("chat")))
    upstreams.secondary.enqueue("anthropic", Reply.sse(messages_tool_use_events("desk_trade", BUY)))
    upstreams.primary.enqueue("openai", Reply.sse(chat_stream_events("Bought.")))
    text, _ = await streamed_text(pod, "messages")
    assert text.startswith(SAID["chat"]) and text.rstrip().endswith("Bought.")
    assert _trades(pod) == 1
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "ok"
    assert record["failover"]["to"] == "then-messages"


async def test_a_next_target_of_another_protocol_that_refuses_the_rest_is_asked_once(
    make_pod: PodMaker, upstreams: Upstreams
) -> None:
    """A Messages caller's prefill goes to a Messages target alone: a Chat target gets the
    rest asked for in the open, and its 400 is not followed by the same request again."""
    pod = await crossing_pod(make_pod, upstreams, "messages", "chat")
    upstreams.primary.enqueue("anthropic", Reply.sse(broken_stream("messages")))
    upstreams.secondary.enqueue("openai", Reply.error("openai", 400, "no"))
    with pytest.raises(anthropic.APIError):
        await streamed_text(pod, "messages")
    (asked,) = upstreams.secondary.requests_to("openai")
    assert asked.json["messages"][-1] == {"role": "user", "content": CONTINUE}
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "error"
    assert "failover" not in record
