"""Attacker's tests (SPEC §21): a token endpoint is hostile input. One that hangs, answers
1 GB, answers what is not JSON or a 200 without a token, or echoes the client's secret fails
the call closed with a clear error, bounded in time and bytes, and the service is never
called."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from clawpod.sidecar.execution.executor import CallLimits, ToolExecutor
from clawpod.sidecar.identity.oauth_client import MAX_TOKEN_RESPONSE_BYTES
from clawpod.sidecar.model.conversation import ToolOutcome
from tests.oauth.test_service_tokens import ENV, SECRET, client_credentials, oauth_tool
from tests.support import secret_sweep
from tests.support.protected_resources import Misbehaviour, hostile_token_endpoint


@pytest.fixture
async def executor() -> AsyncIterator[ToolExecutor]:
    running = ToolExecutor(env=dict(ENV))
    await running.start()
    yield running
    await running.close()


async def call(executor: ToolExecutor, token_url: str, timeout_s: float) -> ToolOutcome:
    # The service's port is closed: a call that reached it would say "unreachable".
    tool = oauth_tool("http://127.0.0.1:9", client_credentials(token_url))
    checked = executor.check(tool, {})
    assert not isinstance(checked, ToolOutcome)
    outcome = await executor.execute("analyst", checked, CallLimits(timeout_s, 65536))
    secret_sweep.collect("tool outcome", orjson.dumps(outcome.envelope))
    return outcome


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        ("hang", "did not answer within 1 s"),
        ("huge", f"larger than {MAX_TOKEN_RESPONSE_BYTES} bytes"),
        ("not json", "answered 200 with a body that is not JSON"),
        ("no token", "answered 200 without an access_token"),
        ("echo secret", "refused: 401 (invalid_client)"),
    ],
)
async def test_a_hostile_token_endpoint_fails_the_call_closed(
    executor: ToolExecutor, behaviour: Misbehaviour, message: str
) -> None:
    secret_sweep.register(SECRET)
    async with hostile_token_endpoint(behaviour) as endpoint:
        outcome = await call(executor, endpoint.url, timeout_s=1.0)
    assert outcome.error_code == "token_unavailable" and not outcome.executed
    assert message in outcome.envelope["error"]["message"]
    assert SECRET not in outcome.envelope["error"]["message"]
    if behaviour == "huge":
        # It stopped reading near the bound, not at the gigabyte.
        assert endpoint.bytes_sent < 64 * 1024 * 1024
