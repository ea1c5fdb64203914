"""An agent that tries to take a pool's keys away from every other agent of the pod (SPEC §14,
docs/providers.md "Keys under hostile agents"): with billing headers, oversized requests,
requests the provider refuses for what they name, and nonsense retry hints. Each attack runs
while a second agent, the bystander, sends its own requests, which must all succeed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import openai
import pytest

from clawpod.sidecar.server.providers.key_pool import DEFAULT_REST_S
from tests.providers.conftest import KEYS, PodMaker, ProviderPod, pool_providers
from tests.providers.provider_rules import AnthropicRules, OpenAIRules
from tests.support.upstream import Received, Reply, openai_completion

ASK = [{"role": "user", "content": "hi"}]
AGENTS = ("analyst", "bystander")
OPENAI_KEYS = (KEYS["OPENAI_KEY_A"], KEYS["OPENAI_KEY_B"])
ANTHROPIC_KEYS = {KEYS["ANTHROPIC_KEY_A"], KEYS["ANTHROPIC_KEY_B"]}


async def _pod(make_pod: PodMaker, **options: Any) -> ProviderPod:
    pod = await make_pod(routes={}, agent_ids=AGENTS, **options)
    pod.upstreams.primary.respond("openai", OpenAIRules(dict.fromkeys(OPENAI_KEYS, "org-pod")))
    pod.upstreams.primary.respond("anthropic", AnthropicRules(set(ANTHROPIC_KEYS)))
    return pod


async def _while_attacked(
    pod: ProviderPod, attack: Callable[[], Awaitable[object]], *, rounds: int = 3
) -> None:
    """``rounds`` attacks by the analyst while the bystander sends twice as many requests of
    each protocol; every one of the bystander's succeeds."""
    chat = pod.openai("bystander")
    messages = pod.anthropic("bystander")

    async def attacks() -> None:
        for _ in range(rounds):
            await attack()

    async def bystander() -> None:
        for _ in range(2 * rounds):
            await chat.chat.completions.create(model="gpt-4o", messages=ASK)  # type: ignore[arg-type]
            await messages.messages.create(model="claude-haiku-4-5", max_tokens=8, messages=ASK)  # type: ignore[arg-type]

    await asyncio.gather(attacks(), bystander())


def _sent_by(pod: ProviderPod, api: str, header: str) -> list[str | None]:
    return [r.headers.get(header) for r in pod.upstreams.primary.requests_to(api)]


async def test_a_foreign_organization_or_project_takes_no_key_away(make_pod: PodMaker) -> None:
    """A header that bills another organization is never forwarded: the provider would refuse
    it on every key, and the pool would lose them all."""
    pod = await _pod(make_pod)
    attacker = pod.openai(organization="org-attacker", project="proj_attacker")

    async def attack() -> None:
        await attacker.chat.completions.create(model="gpt-4o", messages=ASK)  # type: ignore[arg-type]

    await _while_attacked(pod, attack)
    assert set(_sent_by(pod, "openai", "OpenAI-Organization")) == {None}
    assert set(_sent_by(pod, "openai", "OpenAI-Project")) == {None}
    outcomes = [a["outcome"] for r in await pod.audit(3) for a in r["providers"]]
    assert set(outcomes) == {"ok"}


async def test_the_pod_sets_the_billing_headers_of_each_provider(
    make_pod: PodMaker, upstreams: Any
) -> None:
    providers = pool_providers(upstreams)
    billing = {
        "openai": {"openai-organization": "org-pod", "openai-project": "proj_pod"},
        "anthropic": {"anthropic-beta": "context-1m-2025-08-07"},
    }
    for name, headers in billing.items():
        providers[name] = providers[name].model_copy(update={"headers": headers})
    pod = await make_pod(routes={}, providers=providers)
    pod.upstreams.primary.always("openai", Reply.json(openai_completion()))
    rules = AnthropicRules(set(ANTHROPIC_KEYS))
    pod.upstreams.primary.respond("anthropic", rules)
    await pod.openai(organization="org-attacker").chat.completions.create(
        model="gpt-4o",
        messages=ASK,  # type: ignore[arg-type]
    )
    betas = "interleaved-thinking-2025-05-14, fast-mode-2026-02-01,context-1m-2025-08-07"
    await pod.anthropic(default_headers={"anthropic-beta": betas}).messages.create(
        model="claude-haiku-4-5",
        max_tokens=8,
        messages=ASK,  # type: ignore[arg-type]
    )
    chat = pod.upstreams.primary.requests_to("openai")[-1]
    assert chat.headers.getall("OpenAI-Organization") == ["org-pod"]
    assert chat.headers.getall("OpenAI-Project") == ["proj_pod"]
    messages = pod.upstreams.primary.requests_to("anthropic")[-1]
    # One line: the pod's betas first, then the agent's that bill as usual.
    assert messages.headers.getall("anthropic-beta") == [
        "context-1m-2025-08-07,interleaved-thinking-2025-05-14"
    ]


async def test_an_agents_betas_that_bill_differently_are_not_forwarded(
    make_pod: PodMaker,
) -> None:
    pod = await _pod(make_pod)
    betas = "context-1m-2025-08-07,fine-grained-tool-streaming-2025-05-14,fast-mode-2026-02-01"
    client = pod.anthropic(default_headers={"anthropic-beta": betas})
    await client.messages.create(model="claude-haiku-4-5", max_tokens=8, messages=ASK)  # type: ignore[arg-type]
    only_billing = pod.anthropic(
        default_headers={"anthropic-beta": "extended-cache-ttl-2025-04-11"}
    )
    await only_billing.messages.create(model="claude-haiku-4-5", max_tokens=8, messages=ASK)  # type: ignore[arg-type]
    assert _sent_by(pod, "anthropic", "anthropic-beta") == [
        "fine-grained-tool-streaming-2025-05-14",
        None,
    ]


async def test_an_oversized_request_rests_no_key(make_pod: PodMaker) -> None:
    """OpenAI answers a request larger than a key's tokens-per-minute limit with a 429 ("Request
    too large"): it is the agent's answer, tried on no other key, and no key rests."""
    pod = await _pod(make_pod)
    pod.upstreams.primary.respond(
        "openai", OpenAIRules(dict.fromkeys(OPENAI_KEYS, "org-pod"), tokens_per_minute=2000)
    )
    attacker = pod.openai()
    huge = [{"role": "user", "content": "word " * 4000}]

    async def attack() -> None:
        with pytest.raises(openai.RateLimitError) as refused:
            await attacker.chat.completions.create(model="gpt-4o", messages=huge)  # type: ignore[arg-type]
        assert "Request too large" in refused.value.message

    await _while_attacked(pod, attack)
    oversized = [r for r in pod.upstreams.primary.requests_to("openai") if len(r.body) > 8000]
    assert len(oversized) == 3  # each tried once, on one key
    attacker_records = await pod.audit(3)
    assert [[a["outcome"] for a in r["providers"]] for r in attacker_records] == [
        ["request_refused"]
    ] * 3


async def test_an_anthropic_request_over_the_whole_limit_rests_no_key(make_pod: PodMaker) -> None:
    """Anthropic's 429 for a request larger than the key's input-tokens-per-minute limit comes
    with every token counter full: the key was not what ran out."""
    pod = await _pod(make_pod)
    rules = AnthropicRules(set(ANTHROPIC_KEYS), input_tokens_per_minute=1000)
    pod.upstreams.primary.respond("anthropic", rules)
    attacker = pod.anthropic()
    huge = [{"role": "user", "content": "word " * 2000}]

    async def attack() -> None:
        with pytest.raises(anthropic.RateLimitError):
            await attacker.messages.create(model="claude-haiku-4-5", max_tokens=8, messages=huge)  # type: ignore[arg-type]

    await _while_attacked(pod, attack)
    oversized = [r for r in pod.upstreams.primary.requests_to("anthropic") if len(r.body) > 4000]
    assert len(oversized) == 3


async def test_a_key_whose_use_reached_its_limit_rests(make_pod: PodMaker) -> None:
    """The evidence about the key still rests it: OpenAI's "Rate limit reached … Used …"."""
    pod = await _pod(make_pod)
    rules = OpenAIRules(dict.fromkeys(OPENAI_KEYS, "org-pod"), busy={KEYS["OPENAI_KEY_A"]})
    pod.upstreams.primary.respond("openai", rules)
    client = pod.openai()
    for _ in range(3):
        await client.chat.completions.create(model="gpt-4o", messages=ASK)  # type: ignore[arg-type]
    keys = _sent_by(pod, "openai", "Authorization")
    b = f"Bearer {KEYS['OPENAI_KEY_B']}"
    assert keys == [f"Bearer {KEYS['OPENAI_KEY_A']}", b, b, b]
    assert [a["outcome"] for a in (await pod.audit())[0]["providers"]] == ["rate_limited", "ok"]


async def test_a_403_for_what_the_request_names_is_the_agents_alone(make_pod: PodMaker) -> None:
    """A 403 is about the model or object a request names (any agent may name one its keys
    may not use): answered to that agent, tried on no other key, and no key is refused."""
    pod = await _pod(make_pod)
    allowed = OpenAIRules(dict.fromkeys(OPENAI_KEYS, "org-pod"))

    def forbidden_model(received: Received) -> Reply:
        if received.json["model"] == "gpt-4o-forbidden":
            return Reply.error("openai", 403, "You are not allowed to sample from this model")
        return allowed(received)

    pod.upstreams.primary.respond("openai", forbidden_model)
    attacker = pod.openai()

    async def attack() -> None:
        with pytest.raises(openai.PermissionDeniedError):
            await attacker.chat.completions.create(model="gpt-4o-forbidden", messages=ASK)  # type: ignore[arg-type]

    await _while_attacked(pod, attack)
    models = [r.json["model"] for r in pod.upstreams.primary.requests_to("openai")]
    assert models.count("gpt-4o-forbidden") == 3


@pytest.mark.parametrize("header", ["retry-after", "retry-after-ms"])
@pytest.mark.parametrize("value", ["NaN", "inf", "-Infinity", "1e300", "-5"])
async def test_a_nonsense_retry_after_rests_a_key_for_the_default(
    make_pod: PodMaker, header: str, value: str
) -> None:
    pod = await make_pod(routes={})
    for _ in range(2):
        limited = Reply.error("openai", 429, "Rate limit reached", "requests")
        limited.headers[header] = value
        pod.upstreams.primary.enqueue("openai", limited)
    with pytest.raises(openai.RateLimitError) as raised:
        await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)  # type: ignore[arg-type]
    told = int(raised.value.response.headers["retry-after"])
    assert DEFAULT_REST_S - 1 <= told <= DEFAULT_REST_S  # never "1" for a NaN, never forever


async def test_a_429_that_says_nothing_tries_the_next_key_and_rests_none(
    make_pod: PodMaker,
) -> None:
    """A local server's bare 429: another key may take the request, but no key rests on it."""
    pod = await make_pod(routes={})
    bare = Reply(status=429, body=b"slow down", content_type="text/plain")
    pod.upstreams.primary.enqueue("openai", bare, Reply.json(openai_completion()))
    pod.upstreams.primary.enqueue("openai", *[Reply.json(openai_completion())] * 2)
    client = pod.openai()
    for _ in range(3):
        await client.chat.completions.create(model="gpt-4o", messages=ASK)  # type: ignore[arg-type]
    a, b = (f"Bearer {KEYS[k]}" for k in ("OPENAI_KEY_A", "OPENAI_KEY_B"))
    assert _sent_by(pod, "openai", "Authorization") == [a, b, a, b]
    assert [x["outcome"] for x in (await pod.audit())[0]["providers"]] == ["http_429", "ok"]
