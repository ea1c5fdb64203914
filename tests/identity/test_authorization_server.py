"""The door against the suite's real authorization server (authlib,
``tests/support/authorization_server.py``): agents' client-credentials JWTs, end users' tokens
from the authorization code grant with PKCE, key rotation (RS256 to ES256) accepted after one
refresh, and an unknown-``kid`` flood that the server sees as no JWKS fetch at all (it counts
them)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import openai
import pytest

from clawpod.sidecar.manifest import EndUsers, TokenIssuer
from tests.identity.conftest import DoorFactory, DoorPod
from tests.mediation.scripted import oa_calls, oa_text
from tests.support import secret_sweep
from tests.support.authorization_server import (
    AuthorizationServerProcess,
    running_authorization_server,
)
from tests.support.jwks_server import SigningKey, claims
from tests.support.sidecar import audit_records_when
from tests.support.upstream import Reply

GUARD_S = 30.0  # against a hang, never a timing assertion
AGENTS_AUDIENCE, USERS_AUDIENCE = "clawpod", "clawpod-users"
RUNNER, REDIRECT = "runner-app", "http://127.0.0.1/callback"
ASK = [{"role": "user", "content": "What is AAPL at?"}]


@pytest.fixture(scope="module")
def idp() -> Iterator[AuthorizationServerProcess]:
    with running_authorization_server() as server:
        for agent in ("analyst", "ops"):
            server.add_client(agent, f"{agent}-secret-value", audiences=(AGENTS_AUDIENCE,))
        server.add_client(
            RUNNER,
            grant_types=("authorization_code",),
            redirect_uris=(REDIRECT,),
            audiences=(USERS_AUDIENCE,),
        )
        server.add_user("alice", "alice-password")
        yield server


@pytest.fixture
async def door(make_door: DoorFactory, idp: AuthorizationServerProcess) -> DoorPod:
    return await make_door(
        identity=TokenIssuer(
            issuer=idp.issuer,
            audience=AGENTS_AUDIENCE,
            jwks_url=idp.jwks_url,
            jwks_refresh_ms=1000,
        ),
        end_users=EndUsers(
            issuer=idp.issuer,
            audience=USERS_AUDIENCE,
            jwks_url=idp.jwks_url,
            header="x-end-user-token",
        ),
    )


def agent_token(idp: AuthorizationServerProcess, agent: str) -> str:
    token = idp.client_credentials(agent, f"{agent}-secret-value", resource=AGENTS_AUDIENCE)
    secret_sweep.register(token["access_token"])
    return token["access_token"]


def alices_token(idp: AuthorizationServerProcess) -> str:
    token = idp.end_user_token("alice", "alice-password", RUNNER, REDIRECT, resource=USERS_AUDIENCE)
    secret_sweep.register(token["access_token"])
    return token["access_token"]


def jwks_fetches(idp: AuthorizationServerProcess) -> int:
    return idp.counts().get("jwks", 0)


async def test_an_agent_and_its_end_user_by_the_idps_own_tokens(
    door: DoorPod, idp: AuthorizationServerProcess
) -> None:
    door.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("c1", "desk_quote", {"symbol": "AAPL"}))),
        Reply.json(oa_text("AAPL is 1.")),
    )
    user = alices_token(idp)  # its client_id is the runner's: bound to no agent of the pod
    client = door.openai(agent_token(idp, "analyst"), end_user=user)
    completion = await client.chat.completions.create(model="gpt-4o", messages=ASK)
    assert completion.choices[0].message.content == "AAPL is 1."
    (record,) = await audit_records_when(door.state_dir, "analyst", 1)
    assert (record["agent"], record["end_user"]) == ("analyst", "alice")
    assert user not in door.audit_text()
    # Another agent may act for the same user; the record names both.
    door.upstream.enqueue("openai", Reply.json(oa_text("ok")))
    await door.openai(agent_token(idp, "ops"), end_user=user).chat.completions.create(
        model="gpt-4o", messages=ASK
    )
    (record,) = await audit_records_when(door.state_dir, "ops", 1)
    assert (record["agent"], record["end_user"]) == ("ops", "alice")
    # A user's token is not an agent's (another audience), nor an agent's a user's.
    with pytest.raises(openai.PermissionDeniedError, match="audience"):
        await door.openai(user).chat.completions.create(model="gpt-4o", messages=ASK)
    with pytest.raises(openai.PermissionDeniedError, match="end user token refused"):
        await door.openai(
            door.tokens["ops"], end_user=agent_token(idp, "ops")
        ).chat.completions.create(model="gpt-4o", messages=ASK)


async def test_a_rotated_key_is_accepted_after_one_refresh(
    door: DoorPod, idp: AuthorizationServerProcess
) -> None:
    door.upstream.always("openai", Reply.json(oa_text("ok")))
    await door.openai(agent_token(idp, "analyst")).chat.completions.create(
        model="gpt-4o", messages=ASK
    )
    before = jwks_fetches(idp)
    idp.rotate_key("ES256")  # a new kid, of another key type, signs from now on
    rotated = door.openai(agent_token(idp, "analyst"))
    deadline = time.monotonic() + GUARD_S
    while True:  # refused until the refresh interval since the last fetch has passed
        try:
            await rotated.chat.completions.create(model="gpt-4o", messages=ASK)
            break
        except openai.PermissionDeniedError as refused:
            assert "does not publish" in str(refused) and time.monotonic() < deadline
            await asyncio.sleep(0.1)
    assert jwks_fetches(idp) == before + 1


async def test_an_unknown_kid_flood_costs_the_idp_no_fetch_within_the_interval(
    make_door: DoorFactory, idp: AuthorizationServerProcess
) -> None:
    door = await make_door(
        identity=TokenIssuer(issuer=idp.issuer, audience=AGENTS_AUDIENCE, jwks_url=idp.jwks_url)
    )
    door.upstream.always("openai", Reply.json(oa_text("ok")))
    await door.openai(agent_token(idp, "analyst")).chat.completions.create(
        model="gpt-4o", messages=ASK
    )
    before = jwks_fetches(idp)
    forger = SigningKey("forged")
    forged = [
        forger.sign(claims("analyst", iss=idp.issuer, aud=AGENTS_AUDIENCE), kid=uuid.uuid4().hex)
        for _ in range(100)
    ]

    async def attempt(token: str) -> None:
        with pytest.raises(openai.PermissionDeniedError):
            await door.openai(token).chat.completions.create(model="gpt-4o", messages=ASK)

    await asyncio.wait_for(asyncio.gather(*(attempt(t) for t in forged)), GUARD_S)
    assert jwks_fetches(idp) == before  # the last fetch was within the interval (60 s)
