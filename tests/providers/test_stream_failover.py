"""Mid-stream failover (SPEC §14): a streamed answer whose provider breaks after text, before
any tool-call delta and before the client was told it is done, goes on at the route's next
target and reaches the real SDKs as one stream; anything else ends in the protocol's error."""

from __future__ import annotations

import re
from typing import Any

import anthropic
import openai
import orjson
import pytest

from clawpod.sidecar.manifest import Price, RouteTarget
from clawpod.sidecar.server.failover.stream_failover import CONTINUE, Splice, StreamWatch
from tests.providers.conftest import PodMaker, ProviderPod, Upstreams, pool_providers
from tests.providers.streams import chat_stream_events, messages_stream_events
from tests.support import responses as rs
from tests.support.upstream import FIXTURES_DIR as FIXTURES
from tests.support.upstream import RESET, Reply, fixture_files, load_fixture

ASK = [{"role": "user", "content": "count to six"}]


def _renamed(events: list[bytes], old: bytes, new: bytes) -> list[bytes]:
    return [event.replace(old, new) for event in events]


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **payload})


def _text_delta(text: str, index: int = 0) -> bytes:
    delta = {"type": "text_delta", "text": text}
    return _event("content_block_delta", {"index": index, "delta": delta}) + b"\n\n"


async def _chat_chunks(pod: ProviderPod) -> list[Any]:
    chunks = await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK, stream=True)
    return [chunk async for chunk in chunks]


@pytest.mark.parametrize("cut", ["reset", "ended"])
async def test_a_chat_stream_cut_after_text_goes_on_at_the_next_target(
    make_pod: PodMaker, cut: str
) -> None:
    pod = await make_pod()
    events = chat_stream_events("one two three four")
    pod.upstreams.primary.enqueue("openai", Reply.sse([*events[:3], *([RESET] * (cut == "reset"))]))
    rest = _renamed(chat_stream_events("three four"), b"chatcmpl-s", b"chatcmpl-other")
    pod.upstreams.secondary.enqueue("openai", Reply.sse(rest))
    chunks = await _chat_chunks(pod)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three four "
    assert {c.id for c in chunks} == {"chatcmpl-s"}  # one stream to the client
    assert [c.choices[0].delta.role for c in chunks if c.choices].count("assistant") == 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    asked = pod.upstreams.secondary.requests_to("openai")[-1].json
    assert asked["model"] == "gpt-4o-east"
    assert asked["messages"] == [
        *ASK,
        {"role": "assistant", "content": "one two "},
        {"role": "user", "content": CONTINUE},
    ]
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "ok"
    assert record["provider"] == "azure-east"
    cause = "upstream_protocol_error" if cut == "ended" else record["failover"]["cause"]
    assert record["failover"] == {
        "after_text": len("one two "),
        "from": "openai",
        "to": "azure-east",
        "cause": cause,
    }
    assert [a["provider"] for a in record["providers"]] == ["openai", "azure-east"]
    assert 'claw_provider_failovers_total{outcome="stream_cut",provider="openai"} 1.0' in (
        await pod.metrics()
    )


async def test_a_provider_listed_twice_is_not_asked_again_by_the_target_that_broke(
    make_pod: PodMaker,
) -> None:
    twice = [
        RouteTarget(provider="openai"),
        RouteTarget(provider="openai", model="gpt-4o-b"),
        RouteTarget(provider="azure-east", model="gpt-4o-east"),
    ]
    pod = await make_pod(routes={"gpt-4o*": twice})
    events = chat_stream_events("one two three")
    pod.upstreams.primary.enqueue(
        "openai", Reply.error("openai", 503, "down"), Reply.sse([*events[:3], RESET])
    )
    pod.upstreams.secondary.enqueue("openai", Reply.sse(chat_stream_events("three")))
    chunks = await _chat_chunks(pod)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "one two three "
    )
    assert [r.json["model"] for r in pod.upstreams.primary.received] == ["gpt-4o", "gpt-4o-b"]
    (record,) = await pod.audit()
    assert [(a["provider"], a["outcome"]) for a in record["providers"]] == [
        ("openai", "http_503"),
        ("openai", "ok"),
        ("azure-east", "ok"),
    ]


async def test_a_messages_stream_cut_mid_block_goes_on_in_the_same_block(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod()
    head = messages_stream_events("")[:2]  # message_start, the text block's start
    pod.upstreams.primary.enqueue(
        "anthropic", Reply.sse([*head, _text_delta("One, two, "), _text_delta("three "), RESET])
    )
    rest = _renamed(messages_stream_events(" four, five."), b"msg_s", b"msg_other")
    pod.upstreams.secondary.enqueue("anthropic", Reply.sse(rest))
    async with pod.anthropic().messages.stream(
        model="claude-haiku-4-5", max_tokens=64, messages=ASK
    ) as stream:
        message = await stream.get_final_message()
    assert message.id == "msg_s"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "One, two, three four, five."  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    asked = pod.upstreams.secondary.requests_to("anthropic")[-1].json
    # A prefill without its trailing whitespace (the API refuses one that ends in it).
    assert asked["messages"] == [*ASK, {"role": "assistant", "content": "One, two, three"}]
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "ok"
    assert record["failover"]["after_text"] == len("One, two, three ")
    assert (record["failover"]["from"], record["failover"]["to"]) == ("anthropic", "bedrock")


async def test_each_call_of_a_continued_stream_is_charged_at_its_own_price(
    make_pod: PodMaker, upstreams: Upstreams
) -> None:
    providers = pool_providers(upstreams)
    cheap = {"claude-*": Price(input=1.0, cached_input=1.0, output=1.0)}
    dear = {"claude-*": Price(input=100.0, cached_input=100.0, output=100.0)}
    providers["anthropic"] = providers["anthropic"].model_copy(update={"prices": cheap})
    providers["bedrock"] = providers["bedrock"].model_copy(update={"prices": dear})
    pod = await make_pod(providers=providers)
    head = messages_stream_events("", usage=(10, 3))[:2]  # 10 input tokens, 1 output so far
    pod.upstreams.primary.enqueue("anthropic", Reply.sse([*head, _text_delta("One, "), RESET]))
    pod.upstreams.secondary.enqueue("anthropic", Reply.sse(messages_stream_events("two.")))
    async with pod.anthropic().messages.stream(
        model="claude-haiku-4-5", max_tokens=64, messages=ASK
    ) as stream:
        assert await stream.get_final_text() == "One, two."
    (record,) = await pod.audit()
    assert record["usage"]["input_tokens"] == 20
    assert record["usage"]["output_tokens"] == 4
    assert record["usage"]["rounds"] == 2
    # 11 tokens at $1 per million, then 13 at $100 (not all 24 at the last one's price).
    assert record["cost_usd"] == pytest.approx((11 * 1.0 + 13 * 100.0) / 1e6)


async def test_a_target_that_refuses_a_prefill_is_asked_for_the_rest(make_pod: PodMaker) -> None:
    pod = await make_pod()
    head = messages_stream_events("")[:2]
    pod.upstreams.primary.enqueue("anthropic", Reply.sse([*head, _text_delta("One, two, "), RESET]))
    refusal = (
        "This model does not support assistant message prefill. "
        "The conversation must end with a user message."
    )
    pod.upstreams.secondary.enqueue(
        "anthropic",
        Reply.error("anthropic", 400, refusal, type="invalid_request_error"),
        Reply.sse(messages_stream_events("three.")),
    )
    async with pod.anthropic().messages.stream(
        model="claude-haiku-4-5", max_tokens=64, messages=ASK
    ) as stream:
        assert await stream.get_final_text() == "One, two, three."
    prefill, asked = (r.json["messages"] for r in pod.upstreams.secondary.requests_to("anthropic"))
    said = {"role": "assistant", "content": "One, two,"}
    assert prefill == [*ASK, said]
    assert asked == [*ASK, said, {"role": "user", "content": CONTINUE}]
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "ok"
    assert [a["outcome"] for a in record["providers"]] == ["ok", "http_400", "ok"]


async def test_a_chat_stream_cut_after_a_tool_call_delta_is_not_continued(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod()
    events = chat_stream_events("let me look")
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "quote"}}
    tool_delta = orjson.loads(events[1][6:])
    tool_delta["choices"][0]["delta"] = {"tool_calls": [call]}
    tool_event = b"data: " + orjson.dumps(tool_delta) + b"\n\n"
    pod.upstreams.primary.enqueue("openai", Reply.sse([*events[:2], tool_event, RESET]))
    pod.upstreams.secondary.enqueue("openai", Reply.sse(chat_stream_events("must not be asked")))
    with pytest.raises(openai.APIError):
        await _chat_chunks(pod)
    assert pod.upstreams.secondary.received == []
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "error"
    assert "failover" not in record


async def test_a_messages_stream_cut_after_a_tool_use_block_is_not_continued(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod()
    head = messages_stream_events("")[:2]
    tool = {"type": "tool_use", "id": "toolu_1", "name": "quote", "input": {}}
    pod.upstreams.primary.enqueue(
        "anthropic",
        Reply.sse(
            [
                *head,
                _text_delta("Let me look."),
                _event("content_block_stop", {"index": 0}) + b"\n\n",
                _event("content_block_start", {"index": 1, "content_block": tool}) + b"\n\n",
                RESET,
            ]
        ),
    )
    pod.upstreams.secondary.enqueue("anthropic", Reply.sse(messages_stream_events("no")))
    with pytest.raises(anthropic.APIError):
        async with pod.anthropic().messages.stream(
            model="claude-haiku-4-5", max_tokens=64, messages=ASK
        ) as stream:
            await stream.get_final_message()
    assert pod.upstreams.secondary.received == []


async def test_a_stream_the_client_was_told_is_finished_is_not_continued(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod()
    events = chat_stream_events("all of it")
    finish = next(i for i, e in enumerate(events) if b'"finish_reason":"stop"' in e)
    pod.upstreams.primary.enqueue("openai", Reply.sse([*events[: finish + 1], RESET]))
    pod.upstreams.secondary.enqueue("openai", Reply.sse(chat_stream_events("must not be asked")))
    with pytest.raises(openai.APIError):
        await _chat_chunks(pod)
    assert pod.upstreams.secondary.received == []


async def test_when_the_next_target_fails_too_the_client_gets_the_first_streams_error(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod()
    events = chat_stream_events("one two three")
    pod.upstreams.primary.enqueue("openai", Reply.sse([*events[:3], RESET]))
    pod.upstreams.secondary.enqueue("openai", Reply.error("openai", 503, "overloaded"))
    seen: list[str | None] = []
    with pytest.raises(openai.APIError):
        chunks = await pod.openai().chat.completions.create(
            model="gpt-4o", messages=ASK, stream=True
        )
        async for chunk in chunks:
            seen.append(chunk.choices[0].delta.content if chunk.choices else None)
    assert "one " in seen
    assert len(pod.upstreams.secondary.received) == 1
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "error"
    assert record["provider"] == "openai"  # the stream that broke is the answer
    assert "failover" not in record
    assert [a["outcome"] for a in record["providers"]] == ["ok", "http_503"]


def test_an_event_without_an_end_is_not_held_to_be_continued() -> None:
    """A provider that streams one endless event makes the watch give up, holding nothing."""
    watch = StreamWatch()
    watch.feed("chat", b"data: " + orjson.dumps({"id": "c", "choices": []}) + b"\n\n")
    endless = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 65536
    for _ in range(8):
        watch.feed("chat", endless)
    assert not watch.continuable
    assert len(watch._pending) == 0


def test_a_continuation_event_without_an_end_is_passed_on_not_held() -> None:
    watch = StreamWatch()
    watch.feed("chat", b"data: " + orjson.dumps({"id": "c", "choices": []}) + b"\n\n")
    splice = Splice("chat", watch)
    endless = b"data: " + b"x" * (512 * 1024)
    assert splice.feed(endless) == endless


def _responses_events(body: dict[str, Any]) -> list[bytes]:
    return [
        b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
        for kind, payload in rs.sse_events(body)
    ]


async def _responses_stream(pod: ProviderPod) -> tuple[list[Any], Any]:
    """Every event the SDK read, and the response it assembled."""
    stream = await pod.openai().responses.create(model="gpt-4o", input="count", stream=True)
    events = [event async for event in stream]
    completed = [e for e in events if e.type == "response.completed"]
    return events, completed[-1].response if completed else None


@pytest.mark.parametrize("cut", ["reset", "ended"])
async def test_a_responses_stream_cut_after_text_goes_on_at_the_next_target(
    make_pod: PodMaker, cut: str
) -> None:
    """Before: a Responses stream that broke after text ended in an error event (#45)."""
    pod = await make_pod()
    first = _responses_events(rs.response(rs.message("one two three four", "msg_a")))
    # created, in_progress, item added, part added, "one t", "wo th": cut there
    broken = [*first[:6], *([RESET] * (cut == "reset"))]
    pod.upstreams.primary.enqueue("responses", Reply.sse(broken))
    rest = rs.response(rs.message("ree four", "msg_b"), response_id="resp_b", output_tokens=2)
    pod.upstreams.secondary.enqueue("responses", Reply.sse(_responses_events(rest)))
    events, final = await _responses_stream(pod)
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert "".join(e.delta for e in deltas) == "one two three four"
    assert {e.item_id for e in deltas} == {"msg_a"}  # one message to the client
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(events)))  # numbered as one stream
    assert [e.type for e in events].count("response.created") == 1
    assert final.output_text == "one two three four"
    assert final.id == "resp_b"  # the response stored with the whole conversation
    asked = pod.upstreams.secondary.requests_to("responses")[-1].json
    assert asked["model"] == "gpt-4o-east"
    assert asked["input"] == [
        {"role": "user", "content": "count"},
        {"role": "assistant", "content": "one two th"},
        {"role": "user", "content": CONTINUE},
    ]
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "ok"
    assert record["provider"] == "azure-east"
    assert record["failover"]["after_text"] == len("one two th")
    assert record["usage"]["rounds"] == 2


async def test_a_responses_stream_cut_after_a_function_call_is_not_continued(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod()
    events = _responses_events(rs.response(rs.call("call_1", "quote", {"s": "AAPL"})))
    pod.upstreams.primary.enqueue("responses", Reply.sse([*events[:4], RESET]))
    pod.upstreams.secondary.enqueue("responses", Reply.sse(events))
    got, final = await _responses_stream(pod)
    assert got[-1].type == "error" and final is None  # the SDK yields the error event
    assert pod.upstreams.secondary.received == []
    (record,) = await pod.audit()
    assert "failover" not in record


async def test_a_responses_stream_whose_text_was_told_done_is_not_continued(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod()
    events = _responses_events(rs.response(rs.message("one two", "msg_a")))
    done = next(i for i, e in enumerate(events) if b"output_text.done" in e)
    pod.upstreams.primary.enqueue("responses", Reply.sse([*events[: done + 1], RESET]))
    got, final = await _responses_stream(pod)
    assert got[-1].type == "error" and final is None
    assert pod.upstreams.secondary.received == []


HOSTILE = [
    b'data: {"id":"c","choices":[1]}\n\n',
    b'data: {"id":"c","choices":[{"index":0,"delta":"x"}]}\n\n',
    b'data: {"type":"content_block_stop","index":"x"}\n\n',
    b'data: {"type":"content_block_delta","index":0,"delta":[1]}\n\n',
    b'data: {"type":"content_block_start","index":0,"content_block":7}\n\n',
    b"data: [1, 2]\n\n",
    b"data: {not json\n\n",
    b'data: {"type":"response.output_item.added","item":[1]}\n\n',
    b'data: {"type":"response.output_text.delta","item_id":null,"delta":7}\n\n',
    b'data: {"type":"response.completed","response":{"output":[{"type":"message",'
    b'"content":7}]}}\n\n',
    b'data: {"type":"response.output_text.done","text":["x"],"part":"y"}\n\n',
]


@pytest.mark.parametrize("event", HOSTILE)
@pytest.mark.parametrize("protocol", ["chat", "messages", "responses"])
def test_events_of_another_shape_are_no_text_to_continue(protocol: str, event: bytes) -> None:
    """A provider's events may be anything: the watch gives up, the splice passes them on."""
    watch = StreamWatch()
    watch.feed(protocol, event)
    assert not watch.continuable or not watch.text
    spliced = Splice(protocol, StreamWatch()).feed(event)
    assert spliced == b"" or spliced.endswith(b"\n\n")  # whole events, never a crash


def _recorded_streams() -> list[tuple[str, str, bytes]]:
    """(protocol, fixture, body) of every recorded Chat Completions and Messages stream."""
    streams = []
    for name in fixture_files():
        if not name.startswith(("openai/", "anthropic/")):
            continue
        for turn in load_fixture(name):
            chat = turn.request is None or "messages" in turn.request
            if turn.stream and turn.status == 200 and (turn.api == "anthropic" or chat):
                protocol = "messages" if turn.api == "anthropic" else "chat"
                streams.append((protocol, f"{name}#{turn.turn}", turn.body))
    return streams


@pytest.mark.parametrize(("protocol", "fixture", "body"), _recorded_streams())
def test_recorded_streams_are_continuable_until_a_tool_call_or_their_end(
    protocol: str, fixture: str, body: bytes
) -> None:
    """Real providers' streams: text is gathered as it came, and the watch gives up at the
    first tool call or thinking block, and at the end."""
    watch = StreamWatch()
    events = [event + b"\n\n" for event in body.replace(b"\r\n", b"\n").split(b"\n\n")]
    gathered = ""
    for event in events:
        watch.feed(protocol, event)
        if watch.continuable:
            gathered = watch.text
        if re.search(rb'"tool_calls":\[\{|"type":"(?:server_)?tool_use"|"type":"thinking"', event):
            assert not watch.continuable, fixture
    assert not watch.continuable, fixture
    text_first = re.search(rb'"text_delta"|"delta":\{(?:"role":"assistant",)?"content":"[^"]', body)
    tool = re.search(rb'"tool_calls":\[\{|"(?:server_)?tool_use"|"type":"thinking"', body)
    if text_first and (tool is None or text_first.start() < tool.start()):
        assert gathered.strip(), fixture  # text before any tool call: it could go on


def test_a_local_servers_responses_stream_is_continuable_until_its_text_is_done() -> None:
    """llama-server's Responses stream (no output_index or sequence_number on any event)."""
    body = (FIXTURES.parent / "local_servers" / "llama_server.responses_text.sse").read_bytes()
    watch = StreamWatch()
    for event in body.split(b"\n\n"):
        before = watch.text
        watch.feed("responses", event + b"\n\n")
        if b"output_text.done" in event:
            assert not watch.continuable and before == "AAPL is 1."
            return
        assert watch.continuable
    raise AssertionError("the stream's text was never done")
