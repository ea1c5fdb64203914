"""Key pools (SPEC §14): requests rotate over a provider's keys; a 429 about the key rests it,
a 401/402 rests it and, repeated, takes it out until restart; all audited and counted by key
label, never value. Attacks on the pool are in ``test_hostile_agents.py``."""

from __future__ import annotations

import anthropic
import openai
import pytest

from clawpod.sidecar.server.providers.key_pool import DEFAULT_REST_S, MAX_REST_S, KeyPool
from tests.providers.conftest import KEYS, PodMaker
from tests.support.upstream import Reply, anthropic_message, openai_completion

ASK = [{"role": "user", "content": "hi"}]


def _keys_sent(pod, api: str) -> list[str]:  # type: ignore[no-untyped-def]
    requests = pod.upstreams.primary.requests_to(api)
    if api == "openai":
        return [r.headers["Authorization"].removeprefix("Bearer ") for r in requests]
    return [r.headers["x-api-key"] for r in requests]


async def test_requests_rotate_over_the_keys(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})
    for _ in range(4):
        pod.upstreams.primary.enqueue("openai", Reply.json(openai_completion()))
        await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    a, b = KEYS["OPENAI_KEY_A"], KEYS["OPENAI_KEY_B"]
    assert _keys_sent(pod, "openai") == [a, b, a, b]


async def test_a_429_rests_the_key_and_the_next_key_answers(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})
    limited = Reply.error("openai", 429, "slow down", "rate_limit_error")
    limited.headers["retry-after"] = "30"
    pod.upstreams.primary.enqueue("openai", limited, *[Reply.json(openai_completion())] * 3)
    client = pod.openai()
    for _ in range(3):  # key A rests: every request after the first goes with key B
        await client.chat.completions.create(model="gpt-4o", messages=ASK)
    b = KEYS["OPENAI_KEY_B"]
    assert _keys_sent(pod, "openai") == [KEYS["OPENAI_KEY_A"], b, b, b]
    first = (await pod.audit())[0]
    assert first["providers"] == [
        {"provider": "openai", "key": "OPENAI_KEY_A", "outcome": "rate_limited"},
        {"provider": "openai", "key": "OPENAI_KEY_B", "outcome": "ok"},
    ]
    metrics = await pod.metrics()
    expected = (
        'claw_provider_key_events_total{event="rate_limited",key="OPENAI_KEY_A",'
        'provider="openai"} 1.0'
    )
    assert expected in metrics
    assert KEYS["OPENAI_KEY_A"] not in metrics


def _rests_end(pod, provider: str) -> None:  # type: ignore[no-untyped-def]
    """Time passes: every resting key of ``provider`` is back."""
    for key in pod.sidecar.state.upstream.pools[provider].keys:
        key.resting_until = 0.0


@pytest.mark.parametrize("status", [401, 402])
async def test_a_refused_key_rests_and_the_next_key_answers(
    make_pod: PodMaker, status: int
) -> None:
    pod = await make_pod(routes={})
    refused = Reply.error("anthropic", status, "bad key", "authentication_error")
    pod.upstreams.primary.enqueue("anthropic", refused, *[Reply.json(anthropic_message())] * 3)
    client = pod.anthropic()
    for _ in range(3):
        await client.messages.create(model="claude-haiku-4-5", max_tokens=8, messages=ASK)
    b = KEYS["ANTHROPIC_KEY_B"]
    assert _keys_sent(pod, "anthropic") == [KEYS["ANTHROPIC_KEY_A"], b, b, b]
    assert (await pod.audit())[0]["providers"][0] == {
        "provider": "anthropic",
        "key": "ANTHROPIC_KEY_A",
        "outcome": "key_refused",
    }


async def test_every_key_resting_is_a_429_with_retry_after(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})
    for seconds in ("30", "45"):
        limited = Reply.error("openai", 429, "slow down", "rate_limit_error")
        limited.headers["retry-after"] = seconds
        pod.upstreams.primary.enqueue("openai", limited)
    with pytest.raises(openai.RateLimitError) as raised:
        await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    headers = raised.value.response.headers
    assert 29 <= int(headers["retry-after"]) <= 30  # when the first key is back
    assert raised.value.code == "provider_keys_resting"
    # While they rest, nothing goes upstream.
    with pytest.raises(openai.RateLimitError):
        await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    assert len(pod.upstreams.primary.requests_to("openai")) == 2
    record = (await pod.audit(2))[-1]
    assert record["http_status"] == 429
    assert record["providers"] == [{"provider": "openai", "key": None, "outcome": "no_key_ready"}]


async def test_keys_resting_on_one_target_fail_over_to_the_next(make_pod: PodMaker) -> None:
    pod = await make_pod()
    for _ in range(2):
        limited = Reply.error("anthropic", 429, "slow", "rate_limit_error")
        pod.upstreams.primary.enqueue("anthropic", limited)
    pod.upstreams.secondary.enqueue("anthropic", Reply.json(anthropic_message("fallback")))
    message = await pod.anthropic().messages.create(
        model="claude-haiku-4-5", max_tokens=8, messages=ASK
    )
    assert message.content[0].text == "fallback"
    outcomes = [(a["key"], a["outcome"]) for a in (await pod.audit())[0]["providers"]]
    assert outcomes == [
        ("ANTHROPIC_KEY_A", "rate_limited"),
        ("ANTHROPIC_KEY_B", "rate_limited"),
        (None, "no_key_ready"),
        ("BEDROCK_KEY", "ok"),
    ]


async def test_every_key_refused_again_and_again_is_out(make_pod: PodMaker) -> None:
    """Refused once, each key rests; refused again once its rest is over, it is out until
    restart (one 401 may be the provider's passing fault)."""
    pod = await make_pod(routes={})
    for _ in range(2):
        for key in ("OPENAI_KEY_A", "OPENAI_KEY_B"):
            # A hostile provider echoes the key it refused.
            echo = Reply.error("openai", 401, f"invalid key {KEYS[key]}", "invalid_request_error")
            pod.upstreams.primary.enqueue("openai", echo)
    with pytest.raises(openai.AuthenticationError) as raised:
        await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    assert KEYS["OPENAI_KEY_B"] not in raised.value.response.text
    with pytest.raises(openai.RateLimitError):  # both rest
        await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    _rests_end(pod, "openai")
    with pytest.raises(openai.AuthenticationError):
        await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    with pytest.raises(openai.APIStatusError) as again:  # no key left until restart
        await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)
    assert again.value.status_code == 502
    assert again.value.response.headers["x-should-retry"] == "false"
    assert len(pod.upstreams.primary.requests_to("openai")) == 4


async def test_a_hostile_retry_after_cannot_retire_a_key_for_long() -> None:
    now = [1000.0]
    pool = KeyPool(["A", "B"], {"A": "a-value", "B": "b-value"}, clock=lambda: now[0])
    key = pool.take()
    assert key is not None
    assert pool.rest(key, 10**12) == MAX_REST_S
    assert pool.rest(key, -5) == 0.0
    assert pool.rest(key, None) == DEFAULT_REST_S
    now[0] += DEFAULT_REST_S
    assert pool.take() is not None and pool.take() is not None  # both keys usable again


async def test_anthropic_keys_resting_answer_in_anthropics_shape(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})
    for _ in range(2):
        limited = Reply.error("anthropic", 429, "slow", "rate_limit_error")
        pod.upstreams.primary.enqueue("anthropic", limited)
    with pytest.raises(anthropic.RateLimitError) as raised:
        await pod.anthropic().messages.create(model="claude-haiku-4-5", max_tokens=8, messages=ASK)
    assert raised.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert raised.value.response.headers["retry-after"] == "60"


async def test_a_refused_key_comes_back_after_a_restart(make_pod: PodMaker) -> None:
    pod = await make_pod(routes={})
    refused = Reply.error("openai", 401, "bad key", "invalid_request_error")
    ok = Reply.json(openai_completion())
    pod.upstreams.primary.enqueue("openai", refused, ok, ok, refused, ok)
    client = pod.openai()
    await client.chat.completions.create(model="gpt-4o", messages=ASK)  # A refused, B
    await client.chat.completions.create(model="gpt-4o", messages=ASK)  # B
    _rests_end(pod, "openai")
    await client.chat.completions.create(model="gpt-4o", messages=ASK)  # A refused again, B
    await pod.restart()  # the operator replaced the key
    pod.upstreams.primary.enqueue("openai", *[Reply.json(openai_completion())] * 2)
    client = pod.openai()
    for _ in range(2):
        await client.chat.completions.create(model="gpt-4o", messages=ASK)
    assert set(_keys_sent(pod, "openai")[-2:]) == {KEYS["OPENAI_KEY_A"], KEYS["OPENAI_KEY_B"]}
