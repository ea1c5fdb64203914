"""Tokens at the door (SPEC §21): an agent presents its identity provider's JWT instead of its
static token, on the LLM routes and /mcp; a runner passes its end user's token, whose subject
lands in every audit record of the request and nowhere the token itself does. Real SDKs."""

from __future__ import annotations

import time

import aiohttp
import anthropic
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from clawpod.sidecar.manifest import EndUserLimits, Governance, Rate
from tests.identity.conftest import END_USER_HEADER, DoorFactory, DoorPod
from tests.mediation.scripted import an_text, oa_calls, oa_text
from tests.support import secret_sweep
from tests.support.jwks_server import SigningKey, claims
from tests.support.sidecar import audit_records_when
from tests.support.upstream import Reply

MODEL = "gpt-4o"
ASK = [{"role": "user", "content": "What is AAPL at?"}]


def script(pod: DoorPod, *bodies: dict) -> None:
    pod.upstream.enqueue("openai", *(Reply.json(b) for b in bodies))


async def test_an_agent_presents_a_jwt_instead_of_its_static_token(door: DoorPod) -> None:
    script(door, oa_text("hello"))
    token = door.agent_jwt("analyst")
    secret_sweep.register(token)
    completion = await door.openai(token).chat.completions.create(model=MODEL, messages=ASK)
    assert completion.choices[0].message.content == "hello"
    door.upstream.enqueue("anthropic", Reply.json(an_text("hi")))
    message = await door.anthropic(token).messages.create(
        model="claude-haiku-4-5", max_tokens=16, messages=ASK
    )
    assert message.content[0].text == "hi"
    records = await audit_records_when(door.state_dir, "analyst", 2)
    assert all("end_user" not in r for r in records)
    for received in door.upstream.received:
        assert token not in str(received.headers)  # the agent's JWT never goes upstream
    # The static token still works beside it.
    script(door, oa_text("again"))
    await door.openai(door.tokens["analyst"]).chat.completions.create(model=MODEL, messages=ASK)
    # Each record says how the agent proved who it is.
    records = await audit_records_when(door.state_dir, "analyst", 3)
    assert [r["auth"] for r in records] == ["jwt", "jwt", "token"]


async def test_records_name_no_auth_in_a_pod_without_identity(make_door: DoorFactory) -> None:
    door = await make_door(identity=None)
    script(door, oa_text("hello"))
    await door.openai(door.tokens["analyst"]).chat.completions.create(model=MODEL, messages=ASK)
    (record,) = await audit_records_when(door.state_dir, "analyst", 1)
    assert "auth" not in record


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: d.agent_jwt("nobody"), "names no agent"),
        (lambda d: d.agent_jwt("analyst", exp=int(time.time()) - 600), "expired"),
        (lambda d: d.agent_jwt("analyst", aud="elsewhere"), "audience"),
        (lambda d: d.agent_jwt("analyst", iss="https://evil.test"), "issuer"),
        (lambda d: SigningKey(d.agent_key.kid).sign(claims("analyst")), "signature"),
        (lambda d: d.user_token("analyst"), "publish"),  # an end user's token is not an agent's
    ],
)
async def test_a_bad_agent_jwt_is_refused_at_the_door(door: DoorPod, make, reason: str) -> None:
    token = make(door)
    secret_sweep.register(token)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await door.openai(token).chat.completions.create(model=MODEL, messages=ASK)
    assert reason in str(refused.value)
    assert token not in str(refused.value)
    with pytest.raises(anthropic.PermissionDeniedError):
        await door.anthropic(token).messages.create(
            model="claude-haiku-4-5", max_tokens=16, messages=ASK
        )
    assert door.upstream.received == []


async def test_the_end_user_is_in_the_record_of_a_mediated_request(door: DoorPod) -> None:
    script(door, oa_calls(("call_1", "desk_quote", {"symbol": "AAPL"})), oa_text("AAPL is 1."))
    user = door.user_token("alice@example.com")
    client = door.openai(door.agent_jwt("analyst"), end_user=user)
    completion = await client.chat.completions.create(model=MODEL, messages=ASK)
    assert completion.choices[0].message.content == "AAPL is 1."
    (record,) = await audit_records_when(door.state_dir, "analyst", 1)
    assert record["end_user"] == "alice@example.com"
    assert record["tool_trace"][0]["calls"][0]["status"] == 200
    assert user not in door.audit_text()
    for received in door.upstream.received + door.service.requests:
        assert user not in str(received.headers)  # nor to a provider or a tool service


async def test_the_end_user_is_in_the_record_of_an_mcp_call(door: DoorPod) -> None:
    user = door.user_token("bob")
    headers = {"Authorization": f"Bearer {door.agent_jwt('native')}", END_USER_HEADER: user}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(door.sidecar.url + "/mcp", http_client=http)) as client,
    ):
        result = await client.call_tool("desk_quote", {"symbol": "IBM"})
    assert not result.is_error
    (record,) = await audit_records_when(door.state_dir, "native", 1)
    assert record["mode"] == "native" and record["end_user"] == "bob"
    assert record["auth"] == "jwt"
    assert user not in door.audit_text()


@pytest.mark.parametrize(
    "garbage",
    [
        "garbage",
        "Bearer a.b",
        "a.b.c",
        "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.",
        "x." * 3000 + "x",
    ],
)
async def test_a_garbage_end_user_header_is_refused(door: DoorPod, garbage: str) -> None:
    script(door, oa_text("never"))
    client = door.openai(door.tokens["analyst"], end_user=garbage)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await client.chat.completions.create(model=MODEL, messages=ASK)
    assert "end user token refused" in str(refused.value)
    assert door.upstream.received == []


async def test_an_expired_end_user_token_is_refused(door: DoorPod) -> None:
    user = door.user_token("alice", exp=int(time.time()) - 600)
    with pytest.raises(openai.PermissionDeniedError, match="expired"):
        await door.openai(door.tokens["analyst"], end_user=user).chat.completions.create(
            model=MODEL, messages=ASK
        )


async def test_a_token_bound_to_one_agent_is_refused_from_another(door: DoorPod) -> None:
    """Replay: a token issued to an agent of the pod (``azp``) is that agent's alone; one that
    names none, or a party that is no agent (the runner's client), is accepted from any agent,
    and each record names its agent and the end user."""
    bound = door.user_token("carol", azp="analyst")
    with pytest.raises(openai.PermissionDeniedError, match="issued to another agent"):
        await door.openai(door.tokens["ops"], end_user=bound).chat.completions.create(
            model=MODEL, messages=ASK
        )
    script(door, oa_text("ok"), oa_text("ok"))
    await door.openai(door.tokens["analyst"], end_user=bound).chat.completions.create(
        model=MODEL, messages=ASK
    )
    unbound = door.user_token("carol")
    await door.openai(door.tokens["ops"], end_user=unbound).chat.completions.create(
        model=MODEL, messages=ASK
    )
    script(door, oa_text("ok"))
    runners = door.user_token("carol", client_id="runner-app")
    await door.openai(door.tokens["ops"], end_user=runners).chat.completions.create(
        model=MODEL, messages=ASK
    )
    (analysts,) = await audit_records_when(door.state_dir, "analyst", 1)
    (ops, _) = await audit_records_when(door.state_dir, "ops", 2)
    assert (analysts["agent"], analysts["end_user"]) == ("analyst", "carol")
    assert (ops["agent"], ops["end_user"]) == ("ops", "carol")


async def test_an_end_users_budget_is_shared_by_the_pods_agents(make_door: DoorFactory) -> None:
    limits = EndUserLimits(tokens_per_day=100)
    door = await make_door(governance=Governance(end_user_limits=limits))
    script(door, oa_text("spent", tokens=150))
    dave = door.user_token("dave")
    await door.openai(door.tokens["analyst"], end_user=dave).chat.completions.create(
        model=MODEL, messages=ASK
    )
    await audit_records_when(door.state_dir, "analyst", 1)
    # Dave's day is spent, whichever agent works for him.
    with pytest.raises(openai.RateLimitError) as refused:
        await door.openai(door.tokens["ops"], end_user=dave).chat.completions.create(
            model=MODEL, messages=ASK
        )
    assert refused.value.body["code"] == "budget_exhausted"
    # Another end user, and a request for no end user, are not held by Dave's budget.
    script(door, oa_text("fine"), oa_text("fine"))
    erin = door.user_token("erin")
    await door.openai(door.tokens["ops"], end_user=erin).chat.completions.create(
        model=MODEL, messages=ASK
    )
    await door.openai(door.tokens["ops"]).chat.completions.create(model=MODEL, messages=ASK)
    records = await audit_records_when(door.state_dir, "ops", 3)
    assert [r.get("end_user") for r in records] == ["dave", "erin", None]
    assert records[0]["outcome"]["code"] == "budget_exhausted"


async def test_one_end_users_request_is_never_anothers_retry(door: DoorPod) -> None:
    """Exactly once (contract §8.2) resumes a failed request when it is sent again, its calls'
    outcomes replayed, not repeated. Two end users who send one agent the same words are two
    requests: the second never resumes the first's, nor is its trade taken as made."""
    trade = {"symbol": "AAPL", "side": "buy", "quantity": 1}
    words = [{"role": "user", "content": "buy one AAPL"}]
    script(door, oa_calls(("c1", "desk_trade", trade)))
    door.upstream.enqueue("openai", Reply.error("openai", 500, "upstream broke"))
    alices = door.openai(door.tokens["analyst"], end_user=door.user_token("alice"))
    with pytest.raises(openai.InternalServerError):
        await alices.chat.completions.create(model=MODEL, messages=words)
    script(door, oa_calls(("c1", "desk_trade", trade)), oa_text("bought for bob"))
    bobs = door.openai(door.tokens["analyst"], end_user=door.user_token("bob"))
    completion = await bobs.chat.completions.create(model=MODEL, messages=words)
    assert completion.choices[0].message.content == "bought for bob"
    assert [r.raw_path for r in door.service.requests] == ["/trades", "/trades"]


async def test_an_end_users_request_rate_is_shared_by_the_pods_agents(
    make_door: DoorFactory,
) -> None:
    limits = EndUserLimits(requests=Rate(count=2, per="hour"))
    door = await make_door(governance=Governance(end_user_limits=limits))
    door.upstream.always("openai", Reply.json(oa_text("ok")))
    alice = door.user_token("alice")
    for agent in ("analyst", "ops"):
        await door.openai(door.tokens[agent], end_user=alice).chat.completions.create(
            model=MODEL, messages=ASK
        )
    with pytest.raises(openai.RateLimitError) as refused:
        await door.openai(door.tokens["analyst"], end_user=alice).chat.completions.create(
            model=MODEL, messages=ASK
        )
    assert refused.value.body["code"] == "end_user_rate_limited"
    headers = {"Authorization": f"Bearer {door.tokens['native']}", END_USER_HEADER: alice}
    async with (
        aiohttp.ClientSession() as session,
        session.post(door.sidecar.url + "/mcp", json={}, headers=headers) as response,
    ):
        assert response.status == 429 and "limited to 2 per hour" in await response.text()
    # Another end user, and requests for none, are not counted against Alice.
    bob = door.user_token("bob")
    await door.openai(door.tokens["ops"], end_user=bob).chat.completions.create(
        model=MODEL, messages=ASK
    )
    await door.openai(door.tokens["ops"]).chat.completions.create(model=MODEL, messages=ASK)
