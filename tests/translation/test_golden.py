"""Golden tests from the recorded provider exchanges (tests/fixtures/providers, SOURCES.md):
every recorded request translated to each other protocol and back parses, with its codec, to
the same neutral conversation; every recorded answer translated to each other protocol and
back carries the same text, calls, stop and usage (contract §18)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from clawpod.sidecar.codecs import CODECS
from clawpod.sidecar.codecs.base import Codec
from clawpod.sidecar.model.canonical import canonical_arguments
from clawpod.sidecar.model.conversation import Conversation, ModelTurn
from clawpod.sidecar.translation import (
    Translated,
    Untranslatable,
    translate_reply,
    translate_request,
)
from tests.support.upstream import Recorded, fixture_files, load_fixture

CODEC = {codec.name: codec for codec in CODECS}
PROTOCOL_OF_API = {"openai": "chat", "anthropic": "messages"}


def _exchanges() -> list[Recorded]:
    found = []
    for name in fixture_files():
        if name.startswith("derived/"):
            continue  # the same answers as their cassettes
        found += [e for e in load_fixture(name) if e.request is not None or e.status == 200]
    return found


EXCHANGES = _exchanges()
REQUESTS = [e for e in EXCHANGES if e.request is not None and e.request.get("messages")]
ANSWERS = [e for e in EXCHANGES if e.status == 200]


def _id(exchange: Recorded) -> str:
    return f"{exchange.source}#{exchange.turn}"


def _others(protocol: str) -> list[str]:
    return [p for p in CODEC if p != protocol]


def _neutral(conversation: Conversation) -> dict[str, Any]:
    choice = conversation.tool_choice
    return {
        "fingerprints": conversation.fingerprints,
        "seed": conversation.seed,
        "roles": conversation.roles,
        "tools": sorted(conversation.runner_tool_names),
        "choice": (choice.mode, choice.name),
        "stream": conversation.stream,
    }


def test_the_recordings_are_there() -> None:
    assert len(REQUESTS) >= 12 and len(ANSWERS) >= 12


# Features a recorded request uses that no other protocol has: refused (docs/translation.md).
REFUSED = ("the provider-run tool", "web_search_options", "deferred loading")


@pytest.mark.parametrize("exchange", REQUESTS, ids=_id)
def test_a_recorded_request_survives_every_round_trip(exchange: Recorded) -> None:
    source = PROTOCOL_OF_API[exchange.api]
    body = exchange.request
    assert body is not None
    for target in _others(source):
        try:
            there = translate_request(body, source, target)
        except Untranslatable as exc:
            assert str(exc).startswith(REFUSED), exc
            continue
        CODEC[target].parse_request(there.body)  # a valid request of the target protocol
        back = translate_request(there.body, target, source)
        restored = _neutral(CODEC[source].parse_request(back.body))
        expected = _neutral(CODEC[source].parse_request(_carried(body, source, target)))
        # Translated requests are sent whole, never streamed (the caller's stream is rendered).
        assert restored == {**expected, "stream": False}, target


def _carried(body: dict[str, Any], source: str, target: str) -> dict[str, Any]:
    """``body`` less what docs/translation.md says the other protocols cannot carry from Chat:
    empty assistant turns, and for Messages the developer role (it has one system prompt)."""
    if source != "chat":
        return body
    developer = "system" if target == "messages" else "developer"
    messages = [
        {**m, "role": developer} if m["role"] == "developer" else m
        for m in body["messages"]
        if m["role"] != "assistant" or m.get("content") or m.get("tool_calls")
    ]
    return {**body, "messages": messages}


@pytest.mark.parametrize("exchange", ANSWERS, ids=_id)
def test_a_recorded_answer_survives_every_round_trip(exchange: Recorded) -> None:
    source = PROTOCOL_OF_API[exchange.api]
    codec = CODEC[source]
    answer = codec.assemble_stream(exchange.body) if exchange.stream else exchange.json
    original = _meaning(codec, answer)
    request = exchange.request or MINIMAL[source]
    if any(t.get("type", "custom") != "custom" for t in request.get("tools") or []):
        request = MINIMAL[source]  # provider-run tools: the request is refused (see above)
    for target in _others(source):
        # The answer as a caller of ``target`` gets it, and back as its own protocol's.
        there = translate_reply(answer, _translated(request, source, target, caller=target))
        CODEC[target].parse_response(there)
        back = translate_reply(there, _translated(request, source, target, caller=source))
        assert _meaning(codec, back) == original, target


MINIMAL = {
    "chat": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
    "messages": {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}]},
}


def _translated(request: dict[str, Any], source: str, target: str, caller: str) -> Translated:
    """What a reply's translation needs: the request as the ``caller`` sent it."""
    own = source if caller == source else target
    other = target if caller == source else source
    if own == source:
        return translate_request(request, source, other)
    spoken = translate_request(request, source, own).body
    return translate_request(spoken, own, other)


def _meaning(codec: Codec, body: dict[str, Any]) -> dict[str, Any]:
    turn: ModelTurn = codec.parse_response(body)
    text = _text(codec.name, body)
    tokens = codec.usage_counts(body.get("usage"))
    read, _ = codec.cache_counts(body.get("usage"))
    return {
        "text": text,
        "calls": [(c.id, c.name, canonical_arguments(c.arguments)) for c in turn.calls],
        "stop": _stop(codec.name, body),
        "tokens": tokens,
        "cache_read": read,
    }


def _text(protocol: str, body: dict[str, Any]) -> str:
    if protocol == "chat":
        return body["choices"][0]["message"].get("content") or ""
    if protocol == "messages":
        return "".join(b.get("text", "") for b in body["content"] if b["type"] == "text")
    return "".join(
        p.get("text", "")
        for item in body["output"]
        if item["type"] == "message"
        for p in item["content"]
    )


def _stop(protocol: str, body: dict[str, Any]) -> Any:
    if protocol == "chat":
        finish = body["choices"][0].get("finish_reason")
        # A server that never says tool_calls (OpenRouter) is read as asking for tools.
        calls = body["choices"][0]["message"].get("tool_calls")
        return "tool_calls" if calls else finish
    if protocol == "messages":
        return body.get("stop_reason")
    return body.get("status")


def test_usage_keeps_one_meaning_across_the_cache_conventions() -> None:
    """Messages counts cache reads beside input_tokens, the OpenAI protocols inside."""
    request = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 4},
    }
    chat = translate_reply(answer, translate_request(request, "chat", "messages"))
    assert orjson.loads(orjson.dumps(chat["usage"]))["prompt_tokens"] == 100
    assert chat["usage"]["prompt_tokens_details"]["cached_tokens"] == 90
