"""MCP services behind OAuth (SPEC §21), through the official SDK on both sides: the sidecar
sends the token of its client credentials (or the end user's exchanged token), discovers the
token endpoint from the service's RFC 9728 metadata when the descriptor names none, and
follows that hostile metadata only to the hosts the descriptor allows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from clawpod.sidecar.execution.executor import CallLimits, ToolExecutor
from clawpod.sidecar.manifest import ManagedTool
from clawpod.sidecar.model.conversation import ToolOutcome
from clawpod.sidecar.model.end_user import EndUser
from tests.oauth.test_service_tokens import (
    AUDIENCE,
    ENV,
    client_credentials,
    end_user,
    exchange_auth,
    registered,  # noqa: F401 (the fixture)
)
from tests.support import secret_sweep
from tests.support.authorization_server import AuthorizationServerProcess
from tests.support.protected_resources import TokenCheck, protected_mcp_service


def mcp_tool(endpoint: str, auth: dict[str, Any]) -> ManagedTool:
    base, path = endpoint.rsplit("/", 1)
    return ManagedTool.model_validate(
        {
            "name": "desk.get_quote",
            "presented": "desk_get_quote",
            "description": "Latest price of a symbol.",
            "inputSchema": {"type": "object", "properties": {"symbol": {"type": "string"}}},
            "annotations": {"readOnlyHint": True},
            "execution": {
                "transport": "mcp",
                "service": "desk",
                "base_url": base,
                "path": "/" + path,
                "tool": "get_quote",
                "auth": auth,
            },
        }
    )


@pytest.fixture
async def executor() -> AsyncIterator[ToolExecutor]:
    running = ToolExecutor(env=dict(ENV))
    await running.start()
    yield running
    secret_sweep.register(*running.tokens.secrets())
    await running.close()


async def run(
    executor: ToolExecutor, tool: ManagedTool, end_user: EndUser | None = None
) -> ToolOutcome:
    checked = executor.check(tool, {"symbol": "ACME"})
    assert not isinstance(checked, ToolOutcome)
    outcome = await executor.execute("analyst", checked, CallLimits(10.0, 65536), end_user=end_user)
    secret_sweep.collect("tool outcome", orjson.dumps(outcome.envelope))
    return outcome


async def test_client_credentials_reach_an_mcp_service(
    registered: AuthorizationServerProcess,  # noqa: F811
    executor: ToolExecutor,
) -> None:
    async with protected_mcp_service(TokenCheck(registered.issuer, AUDIENCE), []) as service:
        tool = mcp_tool(service.url, client_credentials(registered.token_url))
        first = await run(executor, tool)
        second = await run(executor, tool)
    assert (
        first.envelope
        == second.envelope
        == {
            "ok": True,
            "status": None,
            "data": {"symbol": "ACME", "price": 101.5},
        }
    )
    accepted = [claims for claims in service.check.seen if claims is not None]
    assert accepted and all(c["sub"] == "orders-agent" for c in accepted)


async def test_the_token_endpoint_is_discovered_from_rfc_9728_metadata(
    registered: AuthorizationServerProcess,  # noqa: F811
    executor: ToolExecutor,
) -> None:
    auth = {**client_credentials(""), "discovery-hosts": ["127.0.0.1"]}
    del auth["token-url"]
    before = registered.counts().get("client_credentials", 0)
    check = TokenCheck(registered.issuer, AUDIENCE)
    async with protected_mcp_service(check, [registered.issuer]) as service:
        outcome = await run(executor, mcp_tool(service.url, auth))
    assert outcome.envelope["ok"], outcome.envelope
    assert registered.counts()["client_credentials"] - before == 1


@pytest.mark.parametrize(
    ("servers", "hosts", "message"),
    [
        (["http://169.254.169.254/latest"], ["169.254.169.254", "127.0.0.1"], "link-local"),
        (["http://metadata.internal"], ["127.0.0.1"], "not in discovery-hosts"),
        (["file:///etc/passwd"], ["127.0.0.1"], "not an http(s) URL"),
        ([], ["127.0.0.1"], "names no server"),
    ],
)
async def test_hostile_resource_metadata_is_not_followed(
    registered: AuthorizationServerProcess,  # noqa: F811
    executor: ToolExecutor,
    servers: list[str],
    hosts: list[str],
    message: str,
) -> None:
    auth = {**client_credentials(""), "discovery-hosts": hosts}
    del auth["token-url"]
    check = TokenCheck(registered.issuer, AUDIENCE)
    async with protected_mcp_service(check, servers) as service:
        outcome = await run(executor, mcp_tool(service.url, auth))
    assert outcome.error_code == "token_unavailable" and not outcome.executed
    assert message in outcome.envelope["error"]["message"]
    assert all(claims is None for claims in check.seen)  # the tool was never called


async def test_metadata_on_a_host_not_allowed_is_not_fetched(
    registered: AuthorizationServerProcess,  # noqa: F811
    executor: ToolExecutor,
) -> None:
    auth = {**client_credentials(""), "discovery-hosts": ["idp.example"]}
    del auth["token-url"]
    async with protected_mcp_service(TokenCheck(registered.issuer, AUDIENCE), []) as service:
        outcome = await run(executor, mcp_tool(service.url, auth))
    assert (
        "resource metadata URL is on a host not in discovery-hosts"
        in (outcome.envelope["error"]["message"])
    )


async def test_token_exchange_gives_the_mcp_service_the_users_identity(
    registered: AuthorizationServerProcess,  # noqa: F811
    executor: ToolExecutor,
) -> None:
    alice = end_user(registered, "alice", "alice-password-1")
    secret_sweep.register(alice.token)
    check = TokenCheck(registered.issuer, AUDIENCE)
    async with protected_mcp_service(check, []) as service:
        tool = mcp_tool(service.url, exchange_auth(registered.token_url))
        refused = await run(executor, tool)
        outcome = await run(executor, tool, alice)
    assert refused.error_code == "token_unavailable"
    assert outcome.envelope["ok"], outcome.envelope
    accepted = [claims for claims in check.seen if claims is not None]
    assert accepted and all(c["sub"] == "alice" for c in accepted)
    assert accepted[0]["act"] == {"sub": "orders-agent"}


async def test_an_mcp_401_refreshes_the_token_once(
    registered: AuthorizationServerProcess,  # noqa: F811
    executor: ToolExecutor,
) -> None:
    before = registered.counts().get("client_credentials", 0)
    check = TokenCheck(registered.issuer, AUDIENCE, reject=1)
    async with protected_mcp_service(check, []) as service:
        outcome = await run(
            executor, mcp_tool(service.url, client_credentials(registered.token_url))
        )
    assert outcome.envelope["ok"], outcome.envelope
    assert registered.counts()["client_credentials"] - before == 2
    assert check.seen[0] is None and check.tokens[0] != check.tokens[1]


async def test_an_mcp_service_that_always_answers_401_is_not_asked_again_and_again(
    registered: AuthorizationServerProcess,  # noqa: F811
    executor: ToolExecutor,
) -> None:
    before = registered.counts().get("client_credentials", 0)
    check = TokenCheck(registered.issuer, AUDIENCE, reject=-1)
    async with protected_mcp_service(check, []) as service:
        outcome = await run(
            executor, mcp_tool(service.url, client_credentials(registered.token_url))
        )
    assert outcome.error_code == "http_401" and not outcome.executed
    assert "a fresh one too" in outcome.envelope["error"]["message"]
    # The SDK opens a session in at most two attempts (one per protocol era); each request is
    # sent once with the cached token and once more with a fresh one, never again.
    first, retried = check.tokens[0::2], check.tokens[1::2]
    assert check.calls in (2, 4) and all(a != b for a, b in zip(first, retried, strict=True))
    assert registered.counts()["client_credentials"] - before == check.calls // 2 + 1


async def test_the_drift_check_lists_an_oauth_service_with_the_pods_token(
    registered: AuthorizationServerProcess,  # noqa: F811
    executor: ToolExecutor,
) -> None:
    async with protected_mcp_service(TokenCheck(registered.issuer, AUDIENCE), []) as service:
        tool = mcp_tool(service.url, client_credentials(registered.token_url))
        listed = await executor.mcp.list_tools(executor.mcp.key_for(tool.execution, tool))
    assert "get_quote" in {t.name for t in listed}
    assert all(claims is not None for claims in service.check.seen)
