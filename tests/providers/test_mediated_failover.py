"""Inside a mediated loop a failover repeats only the model call: a tool call that ran is
never run again (SPEC §14); the service's requests are counted."""

from __future__ import annotations

import openai
import orjson
import pytest

from clawpod.sidecar.server.failover.stream_failover import CONTINUE
from tests.mediation.scripted import an_calls, an_text, oa_calls, oa_text
from tests.providers.conftest import PodMaker
from tests.providers.streams import chat_stream_events, messages_stream_events
from tests.support.upstream import RESET, Reply

BUY = {"symbol": "AAPL", "side": "buy", "quantity": 1}
ASK = [{"role": "user", "content": "Buy one AAPL."}]


def _trades(pod) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for r in pod.service.requests if r.path == "/trades")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_failover_between_tool_rounds_runs_each_tool_once_openai(
    make_pod: PodMaker, stream: bool
) -> None:
    pod = await make_pod(mode="mediated")
    primary, secondary = pod.upstreams.primary, pod.upstreams.secondary
    primary.enqueue("openai", Reply.json(oa_calls(("t1", "desk_trade", BUY))))
    primary.enqueue("openai", Reply.error("openai", 503, "overloaded"))
    secondary.enqueue("openai", Reply.json(oa_text("Bought one AAPL.")))
    client = pod.openai()
    if stream:
        chunks = await client.chat.completions.create(model="gpt-4o", messages=ASK, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    else:
        completion = await client.chat.completions.create(model="gpt-4o", messages=ASK)
        text = completion.choices[0].message.content or ""
    assert text == "Bought one AAPL."
    assert _trades(pod) == 1
    # The fallback got the round's result, under its own model id.
    sent = secondary.requests_to("openai")[-1].json
    assert sent["model"] == "gpt-4o-east"
    assert any(m.get("role") == "tool" for m in sent["messages"])
    (record,) = await pod.audit()
    assert [(a["provider"], a["outcome"]) for a in record["providers"]] == [
        ("openai", "ok"),
        ("openai", "http_503"),
        ("azure-east", "ok"),
    ]
    assert [c["status"] for r in record["tool_trace"] for c in r["calls"]] == [200]


async def test_a_failover_between_tool_rounds_runs_each_tool_once_anthropic(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod(mode="mediated", first_byte_timeout_ms=300)
    primary, secondary = pod.upstreams.primary, pod.upstreams.secondary
    primary.enqueue("anthropic", Reply.json(an_calls(("t1", "desk_trade", BUY))))
    primary.enqueue("anthropic", Reply.hang(30.0))  # no first byte: the fallback answers
    secondary.enqueue("anthropic", Reply.json(an_text("Done.")))
    message = await pod.anthropic().messages.create(
        model="claude-haiku-4-5", max_tokens=64, messages=ASK
    )
    assert message.content[-1].text == "Done."  # type: ignore[union-attr]
    assert _trades(pod) == 1
    outcomes = [a["outcome"] for a in (await pod.audit())[0]["providers"]]
    assert outcomes == ["ok", "first_byte_timeout", "ok"]


async def test_keys_resting_in_a_mediated_loop_answer_429_with_retry_after(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod(mode="mediated", routes={})
    primary = pod.upstreams.primary
    primary.enqueue("openai", Reply.json(oa_calls(("q1", "desk_quote", {"symbol": "AAPL"}))))
    for _ in range(2):
        limited = Reply.error("openai", 429, "slow down", "rate_limit_error")
        limited.headers["retry-after"] = "20"
        primary.enqueue("openai", limited)
    with pytest.raises(openai.RateLimitError) as raised:
        await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    assert 19 <= int(raised.value.response.headers["retry-after"]) <= 20
    quotes = [r for r in pod.service.requests if r.path.startswith("/quotes/")]
    assert len(quotes) == 1


# --- a streamed answer round that breaks after text (#45) --------------------------------------


async def test_a_mediated_answer_stream_cut_after_text_goes_on_at_the_next_target_openai(
    make_pod: PodMaker,
) -> None:
    """Before: the client's stream ended in an error after "Bought one " (#45)."""
    pod = await make_pod(mode="mediated")
    primary, secondary = pod.upstreams.primary, pod.upstreams.secondary
    primary.enqueue("openai", Reply.json(oa_calls(("t1", "desk_trade", BUY))))
    answer = chat_stream_events("Bought one AAPL for you.")
    primary.enqueue("openai", Reply.sse([*answer[:3], RESET]))
    secondary.enqueue("openai", Reply.sse(chat_stream_events("AAPL for you.")))
    chunks = await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    assert text == "Bought one AAPL for you. "  # once, no repeat
    assert _trades(pod) == 1  # the round's tool ran once
    sent = secondary.requests_to("openai")[-1].json
    assert sent["messages"][-2:] == [
        {"role": "assistant", "content": "Bought one "},
        {"role": "user", "content": CONTINUE},
    ]
    assert any(m.get("role") == "tool" for m in sent["messages"])  # the round's result
    (record,) = await pod.audit()
    assert record["outcome"]["status"] == "ok"
    assert record["failover"]["from"] == "openai" and record["failover"]["to"] == "azure-east"
    assert record["failover"]["after_text"] == len("Bought one ")


async def test_a_mediated_answer_stream_cut_mid_block_goes_on_in_it_anthropic(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod(mode="mediated")
    primary, secondary = pod.upstreams.primary, pod.upstreams.secondary
    opening = messages_stream_events("")[:2]  # message_start, the text block's start
    delta = {"type": "text_delta", "text": "Bought one"}
    cut = [*opening, _messages_event("content_block_delta", {"index": 0, "delta": delta}), RESET]
    primary.enqueue("anthropic", Reply.sse(cut))
    secondary.enqueue("anthropic", Reply.sse(messages_stream_events(" AAPL.")))
    async with pod.anthropic().messages.stream(
        model="claude-haiku-4-5", max_tokens=64, messages=ASK
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
        message = await stream.get_final_message()
    assert text == "Bought one AAPL."
    assert [b.type for b in message.content] == ["text"]  # one block
    sent = secondary.requests_to("anthropic")[-1].json
    assert sent["messages"][-1] == {"role": "assistant", "content": "Bought one"}  # prefill
    (record,) = await pod.audit()
    assert record["failover"]["to"] == "bedrock"


async def test_a_mediated_stream_cut_after_a_tool_call_delta_is_not_continued(
    make_pod: PodMaker,
) -> None:
    pod = await make_pod(mode="mediated")
    primary, secondary = pod.upstreams.primary, pod.upstreams.secondary
    events = chat_stream_events("let me buy")
    call = {"index": 0, "id": "t1", "type": "function", "function": {"name": "desk_trade"}}
    tool_delta = orjson.loads(events[1][6:])
    tool_delta["choices"][0]["delta"] = {"tool_calls": [call]}
    primary.enqueue(
        "openai", Reply.sse([*events[:2], b"data: " + orjson.dumps(tool_delta) + b"\n\n", RESET])
    )
    secondary.enqueue("openai", Reply.sse(chat_stream_events("must not be asked")))
    with pytest.raises(openai.APIError):
        chunks = await pod.openai().chat.completions.create(
            model="gpt-4o", messages=ASK, stream=True
        )
        _ = [c async for c in chunks]
    assert secondary.received == []
    assert _trades(pod) == 0
    (record,) = await pod.audit()
    assert "failover" not in record


def _messages_event(name: str, payload: dict[str, object]) -> bytes:
    return (
        b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **payload}) + b"\n\n"
    )
