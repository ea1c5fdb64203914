"""Every direction between Chat Completions, Responses and Messages, end to end: the real
openai and anthropic SDKs call the sidecar, a local upstream answers in the provider's own
protocol (contract §18). Pass-through (no tools to inject) and mediated (a sidecar tool run
exactly once, a runner tool handed back)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import orjson
import pytest

from tests.support.upstream import Reply
from tests.translation.conftest import (
    DIRECTIONS,
    MODEL,
    ROUTE,
    TranslatingPod,
    answer_calls,
    answer_text,
    calls_reply,
    text_reply,
)

pytestmark = pytest.mark.parametrize(("caller", "target"), DIRECTIONS)
RUNNER_TOOL = {
    "name": "notify_user",
    "description": "runner-side",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
}


def runner_tools(caller: str) -> list[dict[str, Any]]:
    if caller == "chat":
        return [{"type": "function", "function": RUNNER_TOOL}]
    if caller == "responses":
        return [{"type": "function", **RUNNER_TOOL}]
    tool = {k: v for k, v in RUNNER_TOOL.items() if k != "parameters"}
    return [{**tool, "input_schema": RUNNER_TOOL["parameters"]}]


def user_text(protocol: str, body: dict[str, Any]) -> str:
    """The first user text of an upstream request, in its protocol's shape."""
    if protocol == "responses":
        (item,) = [i for i in body["input"] if i.get("role") == "user"][:1]
        content = item["content"]
        return content if isinstance(content, str) else content[0]["text"]
    message = next(m for m in body["messages"] if m["role"] == "user")
    content = message["content"]
    return content if isinstance(content, str) else content[0]["text"]


async def test_pass_through_answer_in_the_callers_protocol(
    translating_pod: TranslatingPod, caller: str, target: str
) -> None:
    pod = translating_pod
    pod.script(target, text_reply(target, "AAPL trades at 1.", tokens=40))
    answer = await pod.ask(caller, "plain", MODEL[target])
    assert answer_text(caller, answer) == "AAPL trades at 1."
    (sent,) = pod.sent(target)
    assert user_text(target, sent) == "What is AAPL at?"
    assert sent["model"] == MODEL[target]
    if target == "chat" and caller == "messages":
        # A Chat-only (OpenAI-compatible) server reads the limit as max_tokens.
        assert sent["max_tokens"] == 256 and "max_completion_tokens" not in sent
    (received,) = pod.upstream.requests_to(ROUTE[target])
    if target == "messages":
        assert received.headers["x-api-key"] == "sk-ant-test-key"
        assert "authorization" not in received.headers
        assert received.headers["anthropic-version"] == "2023-06-01"  # the API requires one
    else:
        assert received.headers["authorization"].startswith("Bearer sk-")
    usage = answer.usage
    if caller == "chat":
        assert (usage.prompt_tokens, usage.completion_tokens) == (40, 3)
        assert answer.choices[0].finish_reason == "stop"
    elif caller == "messages":
        assert (usage.input_tokens, usage.output_tokens) == (40, 3)
        assert answer.stop_reason == "end_turn"
    else:
        assert (usage.input_tokens, usage.output_tokens) == (40, 3)
        assert answer.status == "completed"
    (record,) = pod.audit("plain")
    assert record["translation"]["from"] == caller and record["translation"]["to"] == [target]
    assert record["usage"]["input_tokens"] == 40


async def test_mediated_sidecar_tool_runs_once_and_the_answer_comes_back(
    translating_pod: TranslatingPod, caller: str, target: str
) -> None:
    pod = translating_pod
    pod.script(
        target,
        calls_reply(target, ("call_1", "desk_quote", {"symbol": "AAPL"})),
        text_reply(target, "AAPL trades at 1."),
    )
    answer = await pod.ask(caller, "analyst", MODEL[target])
    assert answer_text(caller, answer) == "AAPL trades at 1."
    assert answer_calls(caller, answer) == []
    assert [r.path for r in pod.service.requests] == ["/quotes/AAPL"]
    first, second = pod.sent(target)
    names = _tool_names(target, first)
    assert names[:3] == ["desk_quote", "desk_trade", "desk_slow"]
    result = _tool_result(target, second)
    assert result["call_id"] == "call_1"
    assert orjson.loads(result["output"])["data"]["path"] == "/quotes/AAPL"
    records = await _records(pod, "analyst", 1)
    (call,) = records[-1]["tool_trace"][0]["calls"]
    assert call["executed"] is True


async def test_mediated_runner_tool_is_handed_back_in_the_callers_shape(
    translating_pod: TranslatingPod, caller: str, target: str
) -> None:
    pod = translating_pod
    pod.script(target, calls_reply(target, ("call_7", "notify_user", {"text": "hi"})))
    answer = await pod.ask(caller, "analyst", MODEL[target], tools=runner_tools(caller))
    assert answer_calls(caller, answer) == [("call_7", "notify_user", {"text": "hi"})]
    if caller == "chat":
        assert answer.choices[0].finish_reason == "tool_calls"
    elif caller == "messages":
        assert answer.stop_reason == "tool_use"
    assert pod.service.requests == []
    (sent,) = pod.sent(target)
    assert _tool_names(target, sent)[0] == "notify_user"


async def test_provider_error_in_the_callers_shape_naming_the_provider(
    translating_pod: TranslatingPod, caller: str, target: str
) -> None:
    pod = translating_pod
    api = "anthropic" if target == "messages" else "openai"
    refusal = Reply.error(api, 400, "max_tokens: too large", type="invalid_request_error")
    pod.script(target, refusal)
    status, body = await _refused(pod, caller, "plain", MODEL[target])
    assert status == 400
    provider = {"chat": "local", "responses": "gateway", "messages": "anthropic"}[target]
    assert f"provider {provider!r}" in _message(caller, body)
    assert "max_tokens: too large" in _message(caller, body)


@pytest.mark.parametrize(
    "hostile",
    [
        Reply.garbage(),
        Reply.json({"choices": "nope", "content": 7, "output": {"a": 1}}),
        Reply.json([1, 2, 3]),
        Reply.json({"choices": [{"message": {"tool_calls": [{"function": 5}]}}]}),
        Reply.garbage(status=500, content_type="text/html"),
        Reply(body=b'{"id": "x", "choices": [{"message": {"content": "cut sh'),
        Reply.json({"id": "x", "content": [], "output": []}, content_type="text/event-stream"),
    ],
    ids=["not-json", "wrong-types", "array", "bad-call", "html-500", "truncated", "json-as-sse"],
)
@pytest.mark.parametrize("agent", ["plain", "analyst"])
async def test_a_hostile_upstream_body_is_a_clear_error_in_the_callers_protocol(
    translating_pod: TranslatingPod, caller: str, target: str, hostile: Reply, agent: str
) -> None:
    pod = translating_pod
    pod.script(target, hostile)
    status, body = await _refused(pod, caller, agent, MODEL[target])
    assert status in (500, 502)
    assert "provider" in _message(caller, body)
    if caller == "messages":
        assert body["type"] == "error"
    else:
        assert set(body) >= {"message", "code"}


async def test_a_huge_upstream_body_is_refused_not_buffered(
    translating_pod: TranslatingPod, caller: str, target: str
) -> None:
    pod = translating_pod
    limit = 32 << 20  # the default body limit bounds a provider's answer too
    pod.script(target, Reply(body=b'{"x": "' + b"a" * (limit + 10) + b'"}'))
    status, body = await _refused(pod, caller, "plain", MODEL[target])
    assert status == 502
    assert "provider" in _message(caller, body)


# --- helpers ------------------------------------------------------------------------------------


def _tool_names(protocol: str, body: dict[str, Any]) -> list[str]:
    if protocol == "chat":
        return [t["function"]["name"] for t in body["tools"]]
    return [t["name"] for t in body["tools"]]


def _tool_result(protocol: str, body: dict[str, Any]) -> dict[str, Any]:
    if protocol == "chat":
        (message,) = [m for m in body["messages"] if m["role"] == "tool"]
        return {"call_id": message["tool_call_id"], "output": message["content"]}
    if protocol == "responses":
        (item,) = [i for i in body["input"] if i.get("type") == "function_call_output"]
        return {"call_id": item["call_id"], "output": item["output"]}
    (block,) = [b for m in body["messages"] for b in _blocks(m) if b["type"] == "tool_result"]
    output = block["content"]
    text = output if isinstance(output, str) else "".join(p["text"] for p in output)
    return {"call_id": block["tool_use_id"], "output": text}


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return content if isinstance(content, list) else []


async def _records(pod: TranslatingPod, agent: str, count: int) -> list[dict[str, Any]]:
    import asyncio

    for _ in range(300):
        records = pod.audit(agent)
        if len(records) >= count:
            return records
        await asyncio.sleep(0.01)
    raise AssertionError("no audit record")


async def _refused(pod: TranslatingPod, caller: str, agent: str, model: str) -> tuple[int, Any]:
    try:
        await pod.ask(caller, agent, model)
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        return exc.status_code, exc.body
    raise AssertionError("no error")


def _message(caller: str, body: Any) -> str:
    if caller == "messages":
        return str(body["error"]["message"])
    return str(body["message"])


@pytest.mark.parametrize("agent", ["plain", "analyst"])
async def test_a_streaming_caller_gets_one_well_formed_stream(
    translating_pod: TranslatingPod, caller: str, target: str, agent: str
) -> None:
    """The provider is asked for a stream (translated live, tests/translation/
    test_stream_end_to_end.py); one that answers whole anyway is streamed by the caller's own
    codec, and the SDKs' stream parsers accept it."""
    pod = translating_pod
    pod.script(target, text_reply(target, "AAPL trades at 1."))
    text = await _streamed_text(pod, caller, agent, MODEL[target])
    assert text == "AAPL trades at 1."
    (sent,) = pod.sent(target)
    assert sent.get("stream") is True


async def _streamed_text(pod: TranslatingPod, caller: str, agent: str, model: str) -> str:
    prompt = "What is AAPL at?"
    if caller == "messages":
        async with (
            pod.anthropic(agent) as client,
            client.messages.stream(
                model=model, max_tokens=64, messages=[{"role": "user", "content": prompt}]
            ) as stream,
        ):
            return "".join([t async for t in stream.text_stream])
    async with pod.openai(agent) as client:
        if caller == "chat":
            chunks = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": prompt}], stream=True
            )
            return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
        events = await client.responses.create(model=model, input=prompt, stream=True)
        return "".join([e.delta async for e in events if e.type == "response.output_text.delta"])
