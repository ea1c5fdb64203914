"""A retry is the same conversation, not the same bytes (SPEC §8.2): each runner's retry and
rewrite shape, through the real SDKs, counting the orders the trading service receives."""

from __future__ import annotations

from typing import Any

import pytest

from clawpod.sidecar.model.conversation import Conversation
from clawpod.sidecar.server.mediated.model_call import MediatedClient
from clawpod.sidecar.state import journal
from clawpod.sidecar.state.journal import asked_content
from tests.mediation.conftest import MediatedPod
from tests.mediation.scripted import an_calls, an_text, oa_calls, oa_text
from tests.support import responses as r
from tests.support.upstream import Reply

APIS = ["openai", "anthropic", "responses"]
BUY = {"symbol": "AAPL", "side": "buy", "quantity": 1}
SYSTEM = "You are a trading assistant."
ASK = "Buy one AAPL."
# A re-rendered retry in the shape of an earlier OpenClaw (a timestamp and a preamble before the
# text); OpenClaw 2026.9.6's own, recorded, is replayed in test_recorded_retries.py.
REWRITTEN = (
    "[Wed 2026-11-25 20:51 UTC] [Queued user message from a previous active turn was "
    "interrupted] Continue the current task.\n\nBuy one AAPL."
)


def trades(pod: MediatedPod) -> int:
    return sum(1 for request in pod.service.requests if request.path == "/trades")


def answer(api: str, text: str) -> Reply:
    if api == "openai":
        return Reply.json(oa_text(text))
    if api == "anthropic":
        return Reply.json(an_text(text))
    return r.reply(r.response(r.message(text), response_id="resp_2"))


def script(pod: MediatedPod, api: str, *, answered: bool = True) -> None:
    """The model orders, the provider then fails; the retry's model call answers."""
    if api == "openai":
        replies = [Reply.json(oa_calls(("call_0", "desk_trade", BUY))), Reply.json(oa_text("Ok."))]
    elif api == "anthropic":
        replies = [Reply.json(an_calls(("toolu_0", "desk_trade", BUY))), Reply.json(an_text("Ok."))]
    else:
        replies = [
            r.reply(r.response(r.call("call_0", "desk_trade", BUY))),
            r.reply(r.response(r.message("Ok."), response_id="resp_2")),
        ]
    # 503: a status a streamed call with tools is not retried whole for (stream-tools, §7.4).
    failure = Reply.error("anthropic" if api == "anthropic" else "openai", 503, "provider down")
    pod.upstream.enqueue(api, replies[0], failure, *replies[1:] if answered else [])


def body(api: str, ask: str = ASK, **extra: Any) -> dict[str, Any]:
    if api == "openai":
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask}]
        return {"model": "gpt-4o", "messages": messages, **extra}
    if api == "anthropic":
        messages = [{"role": "user", "content": ask}]
        return {"model": "claude-haiku-4-5", "max_tokens": 64, "system": SYSTEM} | {
            "messages": messages,
            **extra,
        }
    return {"model": "gpt-4o", "instructions": SYSTEM, "input": ask, "store": False, **extra}


async def send(pod: MediatedPod, api: str, request: dict[str, Any]) -> str | None:
    """The answer's text, or None when the request failed (as a status or inside a stream)."""
    try:
        if api == "openai":
            client = pod.openai()
            if request.get("stream"):
                chunks = await client.chat.completions.create(**request)
                return "".join(
                    [c.choices[0].delta.content or "" async for c in chunks if c.choices]
                )
            completion = await client.chat.completions.create(**request)
            return completion.choices[0].message.content
        if api == "anthropic":
            client = pod.anthropic()
            if request.get("stream"):
                events = await client.messages.create(**request)
                pieces = [
                    e.delta.text
                    async for e in events
                    if e.type == "content_block_delta" and e.delta.type == "text_delta"
                ]
                return "".join(pieces)
            message = await client.messages.create(**request)
            return message.content[0].text
        client = pod.openai()
        if request.get("stream"):
            events = await client.responses.create(**request)
            pieces = []
            async for event in events:
                if event.type in ("response.failed", "error"):
                    return None
                if event.type == "response.output_text.delta":
                    pieces.append(event.delta)
            return "".join(pieces)
        return (await client.responses.create(**request)).output_text
    except Exception:  # the SDKs raise their own error types, in or out of a stream
        return None


SAMPLING = {"temperature": 0.2, "top_p": 0.9}


def changes(api: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Retry shapes: what the first attempt sent beyond the conversation, what the retry sent."""
    limit = {"openai": "max_tokens", "anthropic": "max_tokens", "responses": "max_output_tokens"}
    user = {"metadata": {"user_id": "u1"}} if api == "anthropic" else {"user": "u1"}
    other_user = {"metadata": {"user_id": "u2"}} if api == "anthropic" else {"user": "u2"}
    metadata = {"metadata": {"session": "a"}}
    if api == "anthropic":
        metadata = {"metadata": {"user_id": "session-a"}}
    other_metadata = (
        {"metadata": {"user_id": "session-b"}} if api == "anthropic" else {"metadata": {"s": "b"}}
    )
    stream_on: dict[str, Any] = {"stream": True}
    if api == "openai":
        stream_on["stream_options"] = {"include_usage": True}
    return {
        "stream-on-then-off": (stream_on, {}),
        "stream-off-then-on": ({}, stream_on),
        "max-tokens": ({limit[api]: 50}, {limit[api]: 80}),
        "metadata": (metadata, other_metadata),
        "user": (user, other_user),
        # This anthropic SDK takes no sampling keywords: they go in the body as they are.
        "sampling": ({}, {"extra_body": SAMPLING} if api == "anthropic" else SAMPLING),
    }


CASES = [(api, name) for api in APIS for name in changes(api)]


@pytest.mark.parametrize(("api", "change"), CASES, ids=[f"{a}-{c}" for a, c in CASES])
async def test_a_retry_that_changes_no_turn_resumes_the_order(
    pod: MediatedPod, api: str, change: str
) -> None:
    """Claude Code retries a failed stream with ``stream: false``; SDK users change limits,
    metadata or sampling between attempts: the order is placed once."""
    first, retry = changes(api)[change]
    script(pod, api)
    assert await send(pod, api, body(api, **first)) is None
    assert trades(pod) == 1
    assert await send(pod, api, body(api, **retry)) == "Ok."
    assert trades(pod) == 1
    records = await pod.wait_for_audit(2)
    assert records[1]["resumed_from"] == records[0]["id"]
    [call] = records[1]["tool_trace"][0]["calls"]
    # The audit counts executions: the resumed attempt replayed the order, it did not place it.
    assert call["replayed"] is True and call["executed"] is False


@pytest.mark.parametrize("api", APIS)
async def test_a_rewritten_last_user_turn_gets_the_failed_rounds_after_it(
    pod: MediatedPod, api: str
) -> None:
    """OpenClaw retries with a new timestamp and a preamble in the last user turn: the model
    sees the order placed and its result after that turn; nothing is sent again."""
    script(pod, api)
    assert await send(pod, api, body(api)) is None
    assert await send(pod, api, body(api, REWRITTEN)) == "Ok."
    assert trades(pod) == 1
    resent = pod.sent(api)[-1]
    if api == "openai":
        assert resent["messages"][1]["content"] == REWRITTEN
        assert resent["messages"][-1]["tool_call_id"] == "call_0"
    elif api == "anthropic":
        assert resent["messages"][0]["content"] == REWRITTEN
        assert resent["messages"][-1]["content"][0]["tool_use_id"] == "toolu_0"
    else:
        assert resent["input"][0]["content"] == REWRITTEN
        assert resent["input"][-1]["call_id"] == "call_0"
    # The link is used once: the same rewrite after the success is a new request.
    pod.upstream.enqueue(api, answer(api, "Hello again."))
    assert await send(pod, api, body(api, REWRITTEN)) == "Hello again."
    records = await pod.wait_for_audit(3)
    assert records[1]["resumed_from"] == records[0]["id"]
    assert "resumed_from" not in records[2]


async def test_what_recognises_a_rewrite_is_read_only_when_a_rewrite_could_be_one(
    pod: MediatedPod, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's last user text (and its history's identity) are read when its attempt fails
    (its link keeps them) and by a request of an agent with a link to adopt, not by one that
    succeeds with none to adopt: together they cost about what the request's identity does."""
    read: list[str] = []

    def counted(conversation: Conversation) -> str:
        read.append(conversation.roles[-1])
        return asked_content(conversation)

    monkeypatch.setattr(journal, "asked_content", counted)
    pod.upstream.enqueue(
        "openai", Reply.json(oa_calls(("call_0", "desk_trade", BUY))), Reply.json(oa_text("Ok."))
    )
    assert await send(pod, "openai", body("openai")) == "Ok."
    assert read == []  # succeeded, nothing to adopt
    script(pod, "openai")
    assert await send(pod, "openai", body("openai", "Buy two AAPL.")) is None
    assert read == ["user"]  # failed: its link keeps them
    assert await send(pod, "openai", body("openai", REWRITTEN.replace("one", "two"))) == "Ok."
    assert read == ["user", "user"]  # a link to adopt: it does
    assert trades(pod) == 2


async def test_another_question_after_a_failure_is_a_new_request(pod: MediatedPod) -> None:
    """Only a trailing user block with the failed one's content continues it."""
    script(pod, "openai", answered=False)
    assert await send(pod, "openai", body("openai")) is None
    pod.upstream.enqueue("openai", Reply.json(oa_text("AAPL is 1.")))
    assert await send(pod, "openai", body("openai", "What is AAPL at?")) == "AAPL is 1."
    assert all(m.get("role") != "tool" for m in pod.sent("openai")[-1]["messages"])
    assert "resumed_from" not in (await pod.wait_for_audit(2))[1]


async def test_a_changed_history_is_not_a_retry(pod: MediatedPod) -> None:
    """A different system prompt (another task of the same agent) starts over."""
    script(pod, "openai", answered=False)
    assert await send(pod, "openai", body("openai")) is None
    other = body("openai")
    other["messages"][0]["content"] = "You are another assistant."
    pod.upstream.enqueue("openai", Reply.json(oa_calls(("call_0", "desk_trade", BUY))))
    pod.upstream.enqueue("openai", Reply.json(oa_text("Bought.")))
    assert await send(pod, "openai", other) is not None
    assert trades(pod) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["status", "in-stream"])
async def test_the_link_to_a_failed_attempt_is_durable_before_the_client_sees_the_failure(
    pod: MediatedPod, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """A runner that re-renders its retry the moment the error arrives finds the failed
    attempt's link (written after the reply, a no-gap retry placed a second order in 2 of 4
    tries)."""
    links_at_reply: list[int] = []
    reply = MediatedClient.reply

    async def replying(client: MediatedClient, command: Any, ran: bool) -> None:
        links_at_reply.append(len(pod.sidecar.state.journal.log.links))
        await reply(client, command, ran)

    monkeypatch.setattr(MediatedClient, "reply", replying)
    script(pod, "openai")
    first = body("openai", stream=True) if stream else body("openai")
    assert await send(pod, "openai", first) is None
    assert links_at_reply == [1]
    assert await send(pod, "openai", body("openai", REWRITTEN)) == "Ok."
    assert trades(pod) == 1
