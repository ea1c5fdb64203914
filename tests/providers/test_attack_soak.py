"""A soak of hostile agents (issue #45): one agent cycles every attack on the pod's providers
(billing headers, oversized requests, a model its keys may not use, an unpriced model under a
USD budget, parallel uncapped requests) while a second agent sends its own requests; the
second agent's success rate must stay 100%. CI size: ``CLAW_ATTACK_SOAK_SECONDS`` (15 s);
the full run is a minute."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import anthropic
import openai
import pytest

from clawpod.sidecar.manifest import Governance
from tests.providers.conftest import KEYS, PodMaker, ProviderPod
from tests.providers.provider_rules import AnthropicRules, OpenAIRules
from tests.support.upstream import Received, Reply

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "hi"}]
HUGE = [{"role": "user", "content": "word " * 4000}]
Attack = Callable[[], Awaitable[object]]


def _attacks(pod: ProviderPod) -> dict[str, Attack]:
    chat = pod.openai()
    foreign = pod.openai(organization="org-attacker", project="proj_attacker")
    messages = pod.anthropic()
    betas = pod.anthropic(default_headers={"anthropic-beta": "context-1m-2025-08-07"})

    async def parallel_uncapped() -> None:
        calls = [chat.chat.completions.create(model="gpt-4o", messages=ASK) for _ in range(10)]  # type: ignore[arg-type]
        await asyncio.gather(*calls, return_exceptions=True)

    return {
        "billing headers": lambda: foreign.chat.completions.create(model="gpt-4o", messages=ASK),  # type: ignore[arg-type]
        "billing betas": lambda: betas.messages.create(
            model="claude-haiku-4-5",
            max_tokens=8,
            messages=ASK,  # type: ignore[arg-type]
        ),
        "oversized chat": lambda: chat.chat.completions.create(model="gpt-4o", messages=HUGE),  # type: ignore[arg-type]
        "oversized messages": lambda: messages.messages.create(
            model="claude-haiku-4-5",
            max_tokens=8,
            messages=HUGE,  # type: ignore[arg-type]
        ),
        "forbidden model": lambda: chat.chat.completions.create(
            model="gpt-4o-forbidden",
            messages=ASK,  # type: ignore[arg-type]
        ),
        "unpriced model": lambda: chat.chat.completions.create(
            model="gpt-oss-120b",
            messages=ASK,  # type: ignore[arg-type]
        ),
        "parallel uncapped": parallel_uncapped,
    }


async def attack_soak(make_pod: PodMaker, seconds: float) -> tuple[Counter[str], Counter[str]]:
    """(the attacks made, the bystander's outcomes) after ``seconds`` of both."""
    governance = Governance(
        budgets={"analyst": 10_000_000}, usd_budgets={"analyst": 100.0, "bystander": 100.0}
    )
    pod = await make_pod(routes={}, governance=governance, agent_ids=("analyst", "bystander"))
    keys = (KEYS["OPENAI_KEY_A"], KEYS["OPENAI_KEY_B"])
    openai_rules = OpenAIRules(dict.fromkeys(keys, "org-pod"), tokens_per_minute=2000)

    def chat_provider(received: Received) -> Reply:
        if received.json["model"] == "gpt-4o-forbidden":
            return Reply.error("openai", 403, "You are not allowed to sample from this model")
        return openai_rules(received)

    pod.upstreams.primary.respond("openai", chat_provider)
    anthropic_keys = {KEYS["ANTHROPIC_KEY_A"], KEYS["ANTHROPIC_KEY_B"]}
    pod.upstreams.primary.respond("anthropic", AnthropicRules(anthropic_keys, 1000))
    attacks = _attacks(pod)
    made: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    deadline = time.monotonic() + seconds

    async def attacker() -> None:
        while time.monotonic() < deadline:
            for name, attack in attacks.items():
                with contextlib.suppress(openai.APIError, anthropic.APIError):
                    await attack()  # refused or not, the attacker's alone
                made[name] += 1

    async def bystander() -> None:
        chat, messages = pod.openai("bystander"), pod.anthropic("bystander")
        while time.monotonic() < deadline:
            for call in (
                lambda: chat.chat.completions.create(model="gpt-4o", messages=ASK),  # type: ignore[arg-type]
                lambda: messages.messages.create(
                    model="claude-haiku-4-5",
                    max_tokens=8,
                    messages=ASK,  # type: ignore[arg-type]
                ),
            ):
                try:
                    await call()
                    outcomes["ok"] += 1
                except (openai.APIError, anthropic.APIError) as exc:
                    outcomes[type(exc).__name__] += 1

    await asyncio.gather(attacker(), bystander())
    return made, outcomes


async def test_attack_soak_ci(make_pod: PodMaker) -> None:
    seconds = float(os.environ.get("CLAW_ATTACK_SOAK_SECONDS", "15"))
    made, outcomes = await attack_soak(make_pod, seconds)
    print(f"attack soak, {seconds:.0f} s: attacks {dict(made)}; bystander {dict(outcomes)}")
    assert min(made.values()) >= 1 and len(made) == 7  # every attack, at least once
    assert set(outcomes) == {"ok"}, outcomes  # the bystander: 100%
    assert outcomes["ok"] >= 10


async def test_attack_soak_full(make_pod: PodMaker) -> None:
    made, outcomes = await attack_soak(make_pod, 60.0)
    assert min(made.values()) >= 5
    assert set(outcomes) == {"ok"}, outcomes
