"""Signed approval webhooks (SPEC §15): a real sidecar POSTs each new approval to a local
receiver that verifies it with the `standardwebhooks` package; retries are bounded and audited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError

from clawpod.sidecar.governance.webhooks import ApprovalWebhook, WebhookSecretError
from clawpod.sidecar.manifest import load_build
from clawpod.sidecar.server.app import create_app
from clawpod.sidecar.server.request.context import STATE_KEY
from tests.execution.test_governance import ENV, POD, TRADE, Desk, compile_desk, trade
from tests.mcp.conftest import mcp_client
from tests.operators.desk import WEBHOOK_SECRET, start_desk
from tests.support.services import ToolService
from tests.support.sidecar import audit_records
from tests.support.sidecar_process import GUARD_S, sidecar_process
from tests.support.upstream import StubUpstream
from tests.transport.raw_server import RawServer


@dataclass
class Receiver:
    """A webhook endpoint that verifies every message with the standardwebhooks library and
    answers ``statuses`` in turn (then 204) to the ones that verify."""

    statuses: list[int] = field(default_factory=list)
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    verified: list[Any] = field(default_factory=list)
    url: str = ""
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = dict(request.headers)
        self.received.append((headers, body))
        try:
            payload = Webhook(WEBHOOK_SECRET).verify(body, headers)
        except WebhookVerificationError as exc:
            return web.Response(status=400, text=str(exc))
        status = self.statuses.pop(0) if self.statuses else 204
        if status < 300:
            self.verified.append(payload)
            self.arrived.set()
        return web.Response(status=status)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    receiving = Receiver()
    app = web.Application()
    app.router.add_post("/approvals", receiving.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiving.url = f"http://127.0.0.1:{runner.addresses[0][1]}/approvals"
    yield receiving
    await runner.cleanup()


@pytest.fixture
async def desk(tmp_path: Path, service: ToolService, receiver: Receiver) -> AsyncIterator[Desk]:
    async with StubUpstream() as upstream:
        running = await start_desk(tmp_path, service, upstream, webhook=receiver.url)
        try:
            yield running
        finally:
            await running.sidecar.close()


async def _webhook_events(desk: Desk, count: int = 1) -> list[dict[str, Any]]:
    while True:
        events = [
            r
            for r in audit_records(desk.state_dir, "trader")
            if r.get("event") == "approval_webhook"
        ]
        if len(events) >= count:
            return events
        await asyncio.sleep(0.05)


async def test_each_new_approval_arrives_signed_and_verifies(
    desk: Desk, receiver: Receiver
) -> None:
    waiting = asyncio.create_task(trade(desk, TRADE))
    [approval] = await desk.pending()
    await asyncio.wait_for(receiver.arrived.wait(), 30)
    [payload] = receiver.verified
    assert payload["id"] == approval["id"] and payload["arguments"] == TRADE
    assert payload["principal"] == "desk-trader" and payload["rule"].startswith("approvals.")
    headers, body = receiver.received[0]
    assert headers["webhook-id"].startswith("msg_")
    assert headers["webhook-signature"].startswith("v1,")
    [event] = await _webhook_events(desk)
    assert event["delivered"] is True and event["attempts"] == 1
    assert event["webhook_id"] == headers["webhook-id"] and event["approval"] == approval["id"]
    await desk.operator("POST", f"/operator/approvals/{approval['id']}", decision="deny")
    await waiting

    # What a receiver must refuse: a changed body, a changed signature, a replay from the past.
    verifier = Webhook(WEBHOOK_SECRET)
    tampered = body.replace(b'"quantity":10', b'"quantity":1000')
    assert tampered != body
    with pytest.raises(WebhookVerificationError, match="signature"):
        verifier.verify(tampered, headers)
    with pytest.raises(WebhookVerificationError):
        moved = str(int(headers["webhook-timestamp"]) - 1)  # the signature covers the time
        verifier.verify(body, {**headers, "webhook-timestamp": moved})
    signer = desk.sidecar.app[STATE_KEY].governed.webhook
    assert signer is not None
    old = signer.signed_headers("msg_old", body, now=datetime.now(UTC) - timedelta(minutes=10))
    with pytest.raises(WebhookVerificationError, match="too old"):
        verifier.verify(body, old)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "b3RoZXIta2V5LW9mLWFub3RoZXItcG9k").verify(body, headers)


async def test_a_failing_receiver_gets_retries_with_the_same_id(
    desk: Desk, receiver: Receiver
) -> None:
    receiver.statuses = [503, 500]
    waiting = asyncio.create_task(trade(desk, TRADE))
    [approval] = await desk.pending()
    await asyncio.wait_for(receiver.arrived.wait(), 30)
    ids = {headers["webhook-id"] for headers, _ in receiver.received}
    assert len(receiver.received) == 3 and len(ids) == 1  # one message, three attempts
    [event] = await _webhook_events(desk)
    assert (event["delivered"], event["attempts"], event["status"]) == (True, 3, 204)
    await desk.operator("POST", f"/operator/approvals/{approval['id']}", decision="deny")
    await waiting


async def test_retries_are_bounded_and_a_refusal_is_not_retried(desk: Desk) -> None:
    """Against a receiver that always fails: a fixed number of attempts, then the audit says
    not delivered; a 4xx refusal is final at once."""
    client = desk.sidecar.app[STATE_KEY].executor.http
    assert client is not None
    attempts: list[int] = []

    async def answer(request: web.Request) -> web.Response:
        attempts.append(1)
        return web.Response(status=int(request.query["status"]))

    app = web.Application()
    app.router.add_post("/", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    try:
        signer = Webhook(WEBHOOK_SECRET)
        failing = ApprovalWebhook(base + "?status=500", signer, max_attempts=4, first_backoff_s=0)
        delivery = await failing.deliver(client, {"id": "apr_x"})
        assert (delivery.delivered, delivery.attempts, len(attempts)) == (False, 4, 4)
        assert delivery.error == "answered 500"
        attempts.clear()
        refused = ApprovalWebhook(base + "?status=401", signer, first_backoff_s=0)
        delivery = await refused.deliver(client, {"id": "apr_y"})
        assert (delivery.delivered, delivery.attempts, len(attempts)) == (False, 1, 1)
        unreachable = ApprovalWebhook("http://127.0.0.1:9/", signer, max_attempts=2)
        unreachable.stop()  # shutdown: no retry waits
        delivery = await unreachable.deliver(client, {"id": "apr_z"})
        assert (delivery.delivered, delivery.attempts, delivery.status) == (False, 1, None)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("secret", [None, "", "whsec_" + "!" * 40, "whsec_c2hvcnQ="])
async def test_a_webhook_without_a_usable_secret_refuses_to_start(
    tmp_path: Path, service: ToolService, receiver: Receiver, secret: str | None
) -> None:
    async with StubUpstream() as upstream:
        desk = await start_desk(tmp_path, service, upstream, webhook=receiver.url)
        await desk.sidecar.close()
    env = {**ENV, "CLAW_AUDIT_KEY": "k" * 64}
    if secret is not None:
        env["CLAW_WEBHOOK_SECRET"] = secret
    with pytest.raises(WebhookSecretError, match="CLAW_WEBHOOK_SECRET"):
        create_app(load_build(desk.out), state_dir=tmp_path / "state2", env=env)


async def test_the_compose_file_passes_the_webhook_secret(
    tmp_path: Path, service: ToolService, receiver: Receiver
) -> None:
    async with StubUpstream() as upstream:
        desk = await start_desk(tmp_path, service, upstream, webhook=receiver.url)
        await desk.sidecar.close()
    compose = yaml.safe_load((desk.out / "compose.yml").read_text())
    environment = compose["services"]["claw-sidecar"]["environment"]
    assert environment["CLAW_WEBHOOK_SECRET"] == "${CLAW_WEBHOOK_SECRET}"  # a name, no value


HUGE_ANSWER_BYTES = 256 * 1024 * 1024
# What reading the answer may add to the sidecar's resident memory: the bound, the transport's
# buffer and the allocator's noise; reading it whole costs the whole answer (+409 MB for 400 MiB).
ANSWER_MEMORY_CAP = 48 * 1024 * 1024


async def _huge_answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer
) -> None:
    """A receiver that accepts with 200 and then sends 256 MiB, until the sidecar hangs up."""
    if await server.read_request(reader) is None:
        return
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % HUGE_ANSWER_BYTES)
    chunk = bytes(1024 * 1024)
    for _ in range(HUGE_ANSWER_BYTES // len(chunk)):
        writer.write(chunk)
        await writer.drain()


async def test_a_receiver_s_huge_answer_is_not_read_into_the_sidecar(
    tmp_path: Path, service: ToolService
) -> None:
    """The receiver is anyone's server: its answer's status is what the sidecar needs, and a
    huge body must not be held (measured from outside: the process's high-water mark)."""
    hostile = await RawServer(_huge_answer).start()
    state = tmp_path / "state"
    async with StubUpstream() as upstream:
        text = POD.replace(
            "timeout-ms: {timeout_ms}}}",
            f'timeout-ms: {{timeout_ms}}, webhook: "{hostile.url("/hook")}"}}}}',
        )
        out, tokens = compile_desk(tmp_path, service, upstream, pod_text=text, timeout_ms=60000)
        env = {**ENV, "CLAW_WEBHOOK_SECRET": WEBHOOK_SECRET}
        async with sidecar_process(out, state, env) as sidecar:
            before, _ = sidecar.memory()
            sidecar.reset_high_water()
            waiting = asyncio.ensure_future(_trade_over_mcp(sidecar.url, tokens["trader"]))
            try:
                event = await asyncio.wait_for(_first_webhook_event(state), GUARD_S)
                _, peak = sidecar.memory()
            finally:
                waiting.cancel()
    assert event["delivered"] is True and event["status"] == 200
    assert len(hostile.requests) == 1
    assert peak - before < ANSWER_MEMORY_CAP, f"+{(peak - before) >> 20} MiB"


async def _trade_over_mcp(url: str, token: str) -> None:
    async with mcp_client(url + "/mcp", token) as client:
        await client.call_tool("desk_execute_trade", TRADE)


async def _first_webhook_event(state: Path) -> dict[str, Any]:
    while True:
        events = [r for r in audit_records(state, "trader") if r.get("event") == "approval_webhook"]
        if events:
            return events[0]
        await asyncio.sleep(0.05)
