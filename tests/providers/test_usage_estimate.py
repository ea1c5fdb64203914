"""#45 "Usage estimates within 25% of the provider's counts": what a model call spent, estimated
where its provider counted none (a stream cut before its usage, a server that reports none),
measured against every recorded provider exchange, whose usage the providers counted.

Before the fix the estimate was a quarter of the request's JSON bytes and one output token per
stream event (a quarter of a whole answer's bytes): 1.2x to 2.9x OpenAI's input counts,
0.13x to 0.86x Anthropic's, and 0.12x to 12x the output counts. The end-to-end tests below
failed there."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import orjson
import pytest

from clawpod.sidecar.codecs import CODECS
from clawpod.sidecar.codecs.usage import StreamUsage
from clawpod.sidecar.manifest import Governance
from clawpod.sidecar.model.token_estimate import reply_tokens, request_tokens
from tests.providers.conftest import PodMaker
from tests.support.upstream import Recorded, Reply, fixture_files, load_fixture

WITHIN = 0.25
PROTOCOL = {"openai": "chat", "anthropic": "messages"}
CODEC = {codec.name: codec for codec in CODECS}

# Recorded exchanges the estimate cannot come within 25% of, and why (by source and turn).
BEYOND_INPUT = {
    # The tool search server tool: the provider samples again inside the call and counts
    # every round's input; the request shows one.
    ("anthropic/stream_server_tool_blocks_then_tool_use.pydantic-ai.yaml", 0),
    ("anthropic/stream_server_tool_blocks_then_tool_use.pydantic-ai.yaml", 1),
}
BEYOND_OUTPUT = {
    ("anthropic/stream_server_tool_blocks_then_tool_use.pydantic-ai.yaml", 0),  # as above
    # OpenRouter (kimi-k2) repeats the call's name in every chunk: one call reads as two,
    # charged 2.2x (over, not under).
    ("openai_compatible/openrouter_kimi_stream_no_finish_reason_repeated_ids.simonw-llm.yaml", 0),
    ("derived/openrouter_kimi_stream_quirks.turn1.sse", 0),
    # "1231 by 2331 is 2,869,461": numbers are a token per one to three digits, not four
    # characters (0.58x).
    ("openai/stream_tool_loop_raw_gpt-4o-mini.simonw-llm.yaml", 1),
}


def _counted(recorded: Recorded) -> tuple[int, int]:
    """(input, output) tokens as the provider counted them in the recorded answer."""
    if not recorded.stream:
        usage = recorded.json.get("usage") or {}
        return _pair(usage)
    counted = (0, 0)
    for line in recorded.body.split(b"\n"):
        if line.startswith(b"data:") and b'"usage"' in line:
            event = orjson.loads(line[5:])
            usage = event.get("usage") or (event.get("message") or {}).get("usage")
            if isinstance(usage, dict):
                counted = tuple(map(max, counted, _pair(usage)))  # type: ignore[assignment]
    return counted


def _pair(usage: dict[str, Any]) -> tuple[int, int]:
    return (
        usage.get("prompt_tokens") or usage.get("input_tokens") or 0,
        usage.get("completion_tokens") or usage.get("output_tokens") or 0,
    )


def _recorded() -> list[Recorded]:
    return [
        recorded
        for name in fixture_files()
        for recorded in load_fixture(name)
        if recorded.status == 200 and any(_counted(recorded))
    ]


def _off(estimate: int, counted: int) -> float:
    return abs(estimate / counted - 1)


@pytest.mark.parametrize("recorded", _recorded(), ids=lambda r: f"{r.source}#{r.turn}")
def test_an_estimate_comes_within_a_quarter_of_the_providers_count(recorded: Recorded) -> None:
    counted_input, counted_output = _counted(recorded)
    protocol = PROTOCOL[recorded.api]
    key = (recorded.source, recorded.turn)
    if recorded.request is not None and counted_input and key not in BEYOND_INPUT:
        assert _off(request_tokens(recorded.request, protocol), counted_input) <= WITHIN
    if counted_output and key not in BEYOND_OUTPUT:
        if recorded.stream:
            usage = StreamUsage(CODEC[protocol])
            usage.feed(recorded.body + b"\n")
            estimate = usage.written_tokens()
        else:
            estimate = reply_tokens(recorded.json, protocol)
        assert _off(estimate, counted_output) <= WITHIN


def _without_usage(recorded: Recorded) -> Reply:
    """The recorded Chat answer as a server that counts nothing sends it."""
    if not recorded.stream:
        body = recorded.json
        del body["usage"]
        return Reply.json(body)
    events = [e + b"\n\n" for e in recorded.body.split(b"\n\n") if e.strip()]
    return Reply.sse([e for e in events if not _tells_usage(e)])


def _tells_usage(event: bytes) -> bool:
    payload = event.strip().removeprefix(b"data:").strip()
    return payload != b"[DONE]" and isinstance(orjson.loads(payload).get("usage"), dict)


CHAT = [
    ("openai/stream_tool_loop_gpt-4o-mini.pydantic-ai.yaml", 0),
    ("openai/stream_tool_loop_gpt-4o-mini.pydantic-ai.yaml", 1),
    ("openai/stream_parallel_tool_calls_multi_round_gpt-4o.pydantic-ai.yaml", 2),
    ("openai/nonstream_parallel_tool_calls_gpt-4o.pydantic-ai.yaml", 0),
]


@pytest.mark.parametrize(("source", "turn"), CHAT, ids=lambda v: str(v))
async def test_a_chat_answer_without_usage_is_charged_near_what_it_spent(
    make_pod: PodMaker, source: str, turn: int
) -> None:
    """The recorded answer with its usage taken out, through the sidecar to the real SDK: the
    audit's estimate is within 25% of what the provider had counted."""
    recorded = load_fixture(source)[turn]
    counted_input, counted_output = _counted(recorded)
    pod = await make_pod(routes={}, governance=Governance(budgets={"analyst": 1_000_000}))
    pod.upstreams.primary.enqueue("openai", _without_usage(recorded))
    request = {k: v for k, v in recorded.request.items() if k != "stream_options"}  # type: ignore[union-attr]
    answer = await pod.openai().chat.completions.create(**request)
    if recorded.stream:
        _ = [chunk async for chunk in answer]  # type: ignore[union-attr]
    (record,) = await pod.audit()
    usage = record["usage"]
    assert usage["estimated"] is True
    assert _off(usage["input_tokens"], counted_input) <= WITHIN
    assert _off(usage["output_tokens"], counted_output) <= WITHIN


async def test_a_messages_stream_cut_before_its_usage_is_charged_near_what_it_spent(
    make_pod: PodMaker,
) -> None:
    recorded = load_fixture("anthropic/stream_tool_loop_haiku-4-5.llm-anthropic.yaml")[1]
    counted_input, counted_output = _counted(recorded)
    pod = await make_pod(routes={}, governance=Governance(budgets={"analyst": 1_000_000}))
    events = recorded.body.split(b"\n\n")
    cut = [e + b"\n\n" for e in events if b"message_delta" not in e and b"message_stop" not in e]
    pod.upstreams.primary.enqueue("anthropic", Reply.sse(cut))
    client: anthropic.AsyncAnthropic = pod.anthropic()
    # This SDK takes no temperature any more; the estimate does not read it.
    request = {k: v for k, v in recorded.request.items() if k != "temperature"}  # type: ignore[union-attr]
    events = await client.messages.create(**request)
    with pytest.raises(anthropic.APIError):  # no message_stop: the stream was cut
        _ = [event async for event in events]
    (record,) = await pod.audit()
    usage = record["usage"]
    assert usage["estimated"] is True
    assert usage["input_tokens"] == counted_input  # the first event counted it
    assert _off(usage["output_tokens"], counted_output) <= WITHIN  # not its 4 of 41


_ = openai  # the Chat tests' client is the SDK pod.openai() returns
