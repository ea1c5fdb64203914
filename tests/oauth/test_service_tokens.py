"""Outbound OAuth (SPEC §21): HTTP tools whose service wants an OAuth token get one from the
suite's real authorization server (client credentials, or RFC 8693 exchange of the end user's
token), fetched once for every waiting call, cached, refreshed once on a 401, and never shown."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from clawpod.sidecar.execution.executor import CallLimits, ToolExecutor
from clawpod.sidecar.identity.oauth_client import ServiceTokens
from clawpod.sidecar.manifest import ManagedTool, ToolAuth
from clawpod.sidecar.model.conversation import ToolOutcome
from clawpod.sidecar.model.end_user import EndUser
from clawpod.sidecar.transport import HttpClient
from tests.support import secret_sweep
from tests.support.authorization_server import AuthorizationServerProcess
from tests.support.protected_resources import TokenCheck, protected_http_service

AUDIENCE = "https://orders.example"
SECRET = "cc-client-secret-0042"
ENV = {"ORDERS_CLIENT_ID": "orders-agent", "ORDERS_CLIENT_SECRET": SECRET}
REDIRECT = "http://127.0.0.1:1/callback"
EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"


@pytest.fixture(scope="module")
def registered(authorization_server: AuthorizationServerProcess) -> AuthorizationServerProcess:
    server = authorization_server
    server.add_client(
        "orders-agent",
        SECRET,
        scopes=("orders.read",),
        audiences=(AUDIENCE,),
        grant_types=("client_credentials", EXCHANGE),
    )
    server.add_client(
        "runner", scopes=("openid",), grant_types=("authorization_code",), redirect_uris=(REDIRECT,)
    )
    server.add_user("alice", "alice-password-1")
    server.add_user("bob", "bob-password-22")
    secret_sweep.register(SECRET)
    return server


def oauth_tool(base_url: str, auth: dict[str, Any]) -> ManagedTool:
    return ManagedTool.model_validate(
        {
            "name": "orders.whoami",
            "presented": "orders_whoami",
            "description": "Who the service sees.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": True},
            "execution": {
                "service": "orders",
                "base_url": base_url,
                "method": "GET",
                "path": "/whoami",
                "body": "none",
                "auth": auth,
            },
        }
    )


def client_credentials(token_url: str) -> dict[str, Any]:
    return {
        "type": "oauth2-client-credentials",
        "token-url": token_url,
        "client-id-env": "ORDERS_CLIENT_ID",
        "client-secret-env": "ORDERS_CLIENT_SECRET",
        "scopes": ["orders.read"],
        "resource": AUDIENCE,
    }


@pytest.fixture
async def executor() -> AsyncIterator[ToolExecutor]:
    running = ToolExecutor(env=dict(ENV))
    await running.start()
    yield running
    secret_sweep.register(*running.tokens.secrets())
    await running.close()


async def run(
    executor: ToolExecutor, tool: ManagedTool, end_user: EndUser | None = None, timeout_s=5.0
) -> ToolOutcome:
    checked = executor.check(tool, {})
    assert not isinstance(checked, ToolOutcome)
    outcome = await executor.execute(
        "analyst", checked, CallLimits(timeout_s, 65536), end_user=end_user
    )
    secret_sweep.collect("tool outcome", orjson.dumps(outcome.envelope))
    return outcome


async def test_client_credentials_fetched_once_for_concurrent_calls_and_cached(
    registered: AuthorizationServerProcess, executor: ToolExecutor
) -> None:
    before = registered.counts().get("client_credentials", 0)
    async with protected_http_service(TokenCheck(registered.issuer, AUDIENCE)) as service:
        tool = oauth_tool(service.url, client_credentials(registered.token_url))
        outcomes = await asyncio.gather(*(run(executor, tool) for _ in range(20)))
        outcomes.append(await run(executor, tool))
    assert all(o.envelope["ok"] for o in outcomes), outcomes[0].envelope
    assert outcomes[0].envelope["data"]["sub"] == "orders-agent"
    assert registered.counts()["client_credentials"] - before == 1  # single flight, then cache
    claims = registered.issued()[-1]
    assert claims["scope"] == "orders.read" and claims["aud"] == AUDIENCE
    # The service echoed the token: the model sees it redacted.
    assert service.check.tokens[0] not in orjson.dumps(outcomes[0].envelope).decode()


async def test_a_401_refreshes_once_and_sends_once_more(
    registered: AuthorizationServerProcess, executor: ToolExecutor
) -> None:
    async with protected_http_service(TokenCheck(registered.issuer, AUDIENCE, reject=1)) as svc:
        tool = oauth_tool(svc.url, client_credentials(registered.token_url))
        before = registered.counts().get("client_credentials", 0)
        outcome = await run(executor, tool)
    assert outcome.envelope["ok"] and svc.check.calls == 2
    assert registered.counts()["client_credentials"] - before == 2
    assert svc.check.tokens[0] != svc.check.tokens[1]


async def test_a_service_that_always_answers_401_is_sent_twice_never_more(
    registered: AuthorizationServerProcess, executor: ToolExecutor
) -> None:
    async with protected_http_service(TokenCheck(registered.issuer, AUDIENCE, reject=-1)) as svc:
        tool = oauth_tool(svc.url, client_credentials(registered.token_url))
        before = registered.counts().get("client_credentials", 0)
        outcome = await run(executor, tool)
    assert outcome.error_code == "http_401" and svc.check.calls == 2
    assert registered.counts()["client_credentials"] - before == 2


async def test_a_failing_token_endpoint_fails_the_call_closed(
    registered: AuthorizationServerProcess, executor: ToolExecutor
) -> None:
    registered.fail_next(1, 503)
    async with protected_http_service(TokenCheck(registered.issuer, AUDIENCE)) as svc:
        tool = oauth_tool(svc.url, client_credentials(registered.token_url))
        outcome = await run(executor, tool)
    assert outcome.error_code == "token_unavailable" and not outcome.executed
    assert "503 (temporarily_unavailable)" in outcome.envelope["error"]["message"]
    assert svc.check.calls == 0


async def test_wrong_client_secret_is_named_without_the_secret(
    registered: AuthorizationServerProcess,
) -> None:
    executor = ToolExecutor(env={**ENV, "ORDERS_CLIENT_SECRET": "wrong-secret-value-9"})
    await executor.start()
    try:
        async with protected_http_service(TokenCheck(registered.issuer, AUDIENCE)) as svc:
            outcome = await run(
                executor, oauth_tool(svc.url, client_credentials(registered.token_url))
            )
    finally:
        await executor.close()
    assert outcome.error_code == "token_unavailable"
    assert "(invalid_client)" in outcome.envelope["error"]["message"]
    assert "wrong-secret" not in orjson.dumps(outcome.envelope).decode()


async def test_unset_client_credentials_are_named(registered: AuthorizationServerProcess) -> None:
    executor = ToolExecutor(env={"ORDERS_CLIENT_ID": "orders-agent"})
    await executor.start()
    try:
        outcome = await run(
            executor, oauth_tool("http://127.0.0.1:1", client_credentials(registered.token_url))
        )
    finally:
        await executor.close()
    assert outcome.error_code == "token_unavailable"
    assert "ORDERS_CLIENT_SECRET is not set" in outcome.envelope["error"]["message"]


def end_user(server: AuthorizationServerProcess, name: str, password: str) -> EndUser:
    answer = server.end_user_token(name, password, "runner", REDIRECT, "openid")
    claims = next(c for c in reversed(server.issued()) if c["sub"] == name)
    return EndUser(name, server.issuer, claims["exp"], answer["access_token"])


def exchange_auth(token_url: str) -> dict[str, Any]:
    return {**client_credentials(token_url), "type": "token-exchange"}


async def test_token_exchange_acts_for_the_end_user_cached_per_user(
    registered: AuthorizationServerProcess, executor: ToolExecutor
) -> None:
    alice = end_user(registered, "alice", "alice-password-1")
    bob = end_user(registered, "bob", "bob-password-22")
    before = registered.counts().get(EXCHANGE, 0)
    async with protected_http_service(TokenCheck(registered.issuer, AUDIENCE)) as svc:
        tool = oauth_tool(svc.url, exchange_auth(registered.token_url))
        first = await run(executor, tool, alice)
        again = await run(executor, tool, alice)
        other = await run(executor, tool, bob)
    assert first.envelope["data"]["sub"] == "alice" and again.envelope["data"]["sub"] == "alice"
    assert first.envelope["data"]["act"] == {"sub": "orders-agent"}
    assert other.envelope["data"]["sub"] == "bob"
    assert registered.counts()[EXCHANGE] - before == 2  # one per user, then cached
    secret_sweep.register(alice.token, bob.token)


async def test_token_exchange_without_an_end_user_is_refused_and_nothing_is_sent(
    registered: AuthorizationServerProcess, executor: ToolExecutor
) -> None:
    before = dict(registered.counts())
    async with protected_http_service(TokenCheck(registered.issuer, AUDIENCE)) as svc:
        outcome = await run(executor, oauth_tool(svc.url, exchange_auth(registered.token_url)))
    assert outcome.error_code == "token_unavailable" and not outcome.executed
    assert "no verified end-user token" in outcome.envelope["error"]["message"]
    assert svc.check.calls == 0 and registered.counts() == before


async def test_a_token_is_fetched_anew_before_it_expires_not_after(
    registered: AuthorizationServerProcess,
) -> None:
    registered.add_client("short-lived", "short-secret-77", expires_in=100)
    secret_sweep.register("short-secret-77")
    now = [1000.0]
    tokens = ServiceTokens({"ID": "short-lived", "SECRET": "short-secret-77"}, clock=lambda: now[0])
    tokens.client = HttpClient(keepalive_s=15, connect_timeout_s=5)
    auth = ToolAuth.model_validate(
        {
            "type": "oauth2-client-credentials",
            "token-url": registered.token_url,
            "client-id-env": "ID",
            "client-secret-env": "SECRET",
        }
    )
    try:
        first = await tokens.token(auth, None, timeout_s=5)
        now[0] += 69  # 100 s lifetime less the 30 s skew: still good
        assert await tokens.token(auth, None, timeout_s=5) == first
        now[0] += 2
        renewed = await tokens.token(auth, None, timeout_s=5)
    finally:
        await tokens.client.close()
    assert renewed != first
    secret_sweep.register(first, renewed)


async def test_a_waiter_that_gives_up_does_not_cancel_the_fetch_others_wait_for(
    registered: AuthorizationServerProcess,
) -> None:
    tokens = ServiceTokens(dict(ENV))
    tokens.client = HttpClient(keepalive_s=15, connect_timeout_s=5)
    auth = ToolAuth.model_validate(client_credentials(registered.token_url))
    before = registered.counts().get("client_credentials", 0)
    try:
        impatient = asyncio.ensure_future(tokens.token(auth, None, timeout_s=5))
        patient = asyncio.ensure_future(tokens.token(auth, None, timeout_s=5))
        await asyncio.sleep(0)
        impatient.cancel()
        token = await patient
    finally:
        await tokens.client.close()
    assert token and registered.counts()["client_credentials"] - before == 1
    secret_sweep.register(token)


async def test_an_exchanged_token_is_not_kept_past_the_end_users_own(
    registered: AuthorizationServerProcess,
) -> None:
    alice = end_user(registered, "alice", "alice-password-1")
    # Alice's session, as the door verified it, ends in 5 s (her token itself lives longer).
    leaving = EndUser(alice.subject, alice.issuer, time.time() + 5, alice.token)
    now = [1000.0]
    tokens = ServiceTokens(dict(ENV), clock=lambda: now[0])
    tokens.client = HttpClient(keepalive_s=15, connect_timeout_s=5)
    auth = ToolAuth.model_validate(exchange_auth(registered.token_url))
    before = registered.counts().get(EXCHANGE, 0)
    try:
        first = await tokens.token(auth, leaving, timeout_s=5)
        assert await tokens.token(auth, leaving, timeout_s=5) == first
        now[0] += 6
        await tokens.token(auth, leaving, timeout_s=5)
    finally:
        await tokens.client.close()
    assert registered.counts()[EXCHANGE] - before == 2
    secret_sweep.register(alice.token, *tokens.secrets())


async def test_no_exchange_acts_for_an_end_user_after_their_token_expired(
    registered: AuthorizationServerProcess, executor: ToolExecutor
) -> None:
    """The door verified alice's token; it expired while her long request ran (its ``exp`` is
    past now). A tool acting on her behalf is refused, exchanged token cached or not: neither
    the token endpoint nor the service hears of it."""
    alice = end_user(registered, "alice", "alice-password-1")
    async with protected_http_service(TokenCheck(registered.issuer, AUDIENCE)) as svc:
        tool = oauth_tool(svc.url, exchange_auth(registered.token_url))
        assert (await run(executor, tool, alice)).executed  # cached from now on
        before, served = dict(registered.counts()), svc.check.calls
        expired = EndUser(alice.subject, alice.issuer, time.time() - 1, alice.token)
        outcome = await run(executor, tool, expired)
        client_credentials_tool = oauth_tool(svc.url, client_credentials(registered.token_url))
        agents_own = await run(executor, client_credentials_tool, expired)
    assert outcome.error_code == "token_unavailable" and not outcome.executed
    assert "token expired while the request ran" in outcome.envelope["error"]["message"]
    assert agents_own.executed  # the agent's own credentials are not the end user's
    assert registered.counts().get(EXCHANGE) == before.get(EXCHANGE)
    assert svc.check.calls == served + 1  # the client-credentials call only
    secret_sweep.register(alice.token)
