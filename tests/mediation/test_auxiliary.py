"""Auxiliary requests get no tools (SPEC §7.3): a runner's title, summary or compaction request
(no tools, no tool_choice, a system text about the conversation itself) goes through as sent
under ``tool-injection: auto``, audited ``tools_injected: false``; opencode's title request got
every granted tool, destructive ones included, and placed an order."""

from __future__ import annotations

from typing import Any

import pytest

from tests.mediation.conftest import MediatedPod, PodFactory
from tests.mediation.scripted import an_text, oa_text
from tests.support.responses import message, response
from tests.support.upstream import Reply

TITLE = "You are a title generator. You output ONLY a thread title. Nothing else."
SUMMARY = "Summarize this coding conversation in under 50 characters."
COMPACTION = "Compact the session so far into a summary the next turn can continue from."
ASK = "Buy one AAPL and tell me when it is done."


async def ask(pod: MediatedPod, api: str, system: str, **extra: Any) -> None:
    if api == "openai":
        messages = [{"role": "system", "content": system}, {"role": "user", "content": ASK}]
        pod.upstream.enqueue(api, Reply.json(oa_text("Buying AAPL")))
        await pod.openai().chat.completions.create(model="gpt-4o", messages=messages, **extra)
    elif api == "anthropic":
        pod.upstream.enqueue(api, Reply.json(an_text("Buying AAPL")))
        await pod.anthropic().messages.create(
            model="claude-haiku-4-5",
            max_tokens=64,
            system=system,
            messages=[{"role": "user", "content": ASK}],
            **extra,
        )
    else:
        pod.upstream.enqueue(api, Reply.json(response(message("Buying AAPL"))))
        await pod.openai().responses.create(model="gpt-4o", instructions=system, input=ASK, **extra)


CASES = [
    (api, system)
    for api in ("openai", "anthropic", "responses")
    for system in (TITLE, SUMMARY, COMPACTION)
]


@pytest.mark.parametrize(
    ("api", "system"), CASES, ids=[f"{a}-{s.split()[0]}{len(s)}" for a, s in CASES]
)
async def test_an_auxiliary_request_gets_no_tools(pod: MediatedPod, api: str, system: str) -> None:
    await ask(pod, api, system)
    [sent] = pod.sent(api)
    assert "tools" not in sent
    [record] = await pod.wait_for_audit(1)
    assert (record["tools_injected"], record["reason"]) == (False, "auxiliary")


@pytest.mark.parametrize("api", ["openai", "anthropic", "responses"])
async def test_tool_injection_always_injects_into_auxiliary_requests(
    make_pod: PodFactory, api: str
) -> None:
    pod = await make_pod(tool_injection="always")
    await ask(pod, api, TITLE)
    assert "desk_trade" in str(pod.sent(api)[0]["tools"])
    assert "tools_injected" not in (await pod.wait_for_audit(1))[0]


async def test_a_tool_choice_or_an_ordinary_system_prompt_is_not_auxiliary(
    pod: MediatedPod,
) -> None:
    await ask(pod, "openai", TITLE, tool_choice="auto")
    await ask(pod, "openai", "You are a trading assistant; summarize what you did.")
    assert all("desk_trade" in str(sent["tools"]) for sent in pod.sent("openai"))
