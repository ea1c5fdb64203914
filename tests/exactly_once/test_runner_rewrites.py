"""Continuity through real runners' rewrites (SPEC §8.3): a conversation corpus in
tests/fixtures/runners/ replays each runner's second request as it rewrites the history; the
hidden round of the first request must come back before the turn it led to, through the real
SDKs, and no tool runs again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.mediation.conftest import MediatedPod
from tests.mediation.scripted import an_calls, an_text, oa_calls, oa_text
from tests.support.upstream import Reply

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "runners"
CASES = sorted(CORPUS.glob("*.json"))


def hidden_ids(api: str, messages: list[dict[str, Any]]) -> list[str]:
    ids: list[str] = []
    for message in messages:
        if api == "openai":
            ids += [c["id"] for c in message.get("tool_calls") or []]
        elif isinstance(message["content"], list):
            ids += [b["id"] for b in message["content"] if b.get("type") == "tool_use"]
    return ids


async def send(pod: MediatedPod, api: str, body: dict[str, Any]) -> Any:
    if api == "openai":
        return await pod.openai().chat.completions.create(**body)
    return await pod.anthropic().messages.create(**body)


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
async def test_a_runner_rewrite_keeps_the_hidden_rounds(pod: MediatedPod, case: Path) -> None:
    fixture = orjson.loads(case.read_bytes())
    api = fixture["api"]
    pod.upstream.enqueue(api, *(Reply.json(r) for r in fixture["replies1"]))
    await send(pod, api, fixture["turn1"])
    assert len(pod.service.requests) == 1
    pod.upstream.enqueue(api, Reply.json(fixture["reply2"]))
    await send(pod, api, fixture["turn2"])
    resent = pod.sent(api)[-1]["messages"]
    assert fixture["hidden_call_id"] in hidden_ids(api, resent), fixture["rewrite"]
    assert len(pod.service.requests) == 1
    records = await pod.wait_for_audit(2)
    assert records[-1]["hidden_rounds_restored"] == 1


CONTEXT = {"role": "user", "content": "<system-reminder>repo: /src</system-reminder>"}


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("shared", [[], [CONTEXT]], ids=["plain", "shared-context-message"])
async def test_two_conversations_with_equal_answers_never_mix(
    pod: MediatedPod, api: str, shared: list[dict[str, Any]]
) -> None:
    """Also when a runner puts the same context message right before every answer."""
    calls, text = (oa_calls, oa_text) if api == "openai" else (an_calls, an_text)
    model = "gpt-4o" if api == "openai" else "claude-haiku-4-5"
    extra = {} if api == "openai" else {"max_tokens": 64}
    asks = {"a": "What is AAPL at?", "b": "What is MSFT at?"}
    for name, ask in asks.items():
        symbol = ask.split()[2].rstrip("?")
        pod.upstream.enqueue(
            api,
            Reply.json(calls((f"call_{name}", "desk_quote", {"symbol": symbol}))),
            Reply.json(text("Done.")),
        )
        first = [{"role": "user", "content": ask}, *shared]
        await send(pod, api, {"model": model, "messages": first} | extra)
    for name, ask in asks.items():
        pod.upstream.enqueue(api, Reply.json(text("ok")))
        messages = [
            {"role": "user", "content": ask},
            *shared,
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Thanks."},
        ]
        await send(pod, api, {"model": model, "messages": messages} | extra)
        assert hidden_ids(api, pod.sent(api)[-1]["messages"]) == [f"call_{name}"]
