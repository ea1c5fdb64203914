"""docs/operators.md runs: its secret recipe makes a secret the library accepts, and its
verifying receiver accepts what a real sidecar sends."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest
from aiohttp import web
from standardwebhooks import Webhook

from tests.execution.test_governance import TRADE, trade
from tests.operators.desk import WEBHOOK_SECRET, start_desk
from tests.support.services import ToolService
from tests.support.sidecar import audit_records
from tests.support.upstream import StubUpstream

DOC = Path(__file__).resolve().parents[2] / "docs" / "operators.md"


def _block(language: str, containing: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)
    return next(block for block in blocks if containing in block)


def test_the_secret_recipe_makes_a_standard_webhooks_secret(tmp_path: Path) -> None:
    recipe = _block("sh", "CLAW_WEBHOOK_SECRET")
    subprocess.run(["sh", "-c", recipe], cwd=tmp_path, check=True)
    name, _, secret = (tmp_path / ".env").read_text().strip().partition("=")
    assert name == "CLAW_WEBHOOK_SECRET" and secret.startswith("whsec_")
    Webhook(secret)  # the library takes it


async def test_the_documented_receiver_verifies_a_real_sidecars_webhook(
    tmp_path: Path,
    service: ToolService,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CLAW_WEBHOOK_SECRET", WEBHOOK_SECRET)
    namespace: dict = {}
    exec(compile(_block("python", "verifier.verify"), str(DOC), "exec"), namespace)
    runner = web.AppRunner(namespace["app"], access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/approvals"
    try:
        async with StubUpstream() as upstream:
            desk = await start_desk(tmp_path, service, upstream, webhook=url)
            try:
                waiting = asyncio.create_task(trade(desk, TRADE))
                [approval] = await desk.pending()
                while not [
                    r
                    for r in audit_records(desk.state_dir, "trader")
                    if r.get("event") == "approval_webhook"
                ]:
                    await asyncio.sleep(0.05)
                [event] = [
                    r
                    for r in audit_records(desk.state_dir, "trader")
                    if r.get("event") == "approval_webhook"
                ]
                assert (event["delivered"], event["status"]) == (True, 204)
                assert "trader waits for desk.execute_trade" in capsys.readouterr().out
                await desk.operator(
                    "POST", f"/operator/approvals/{approval['id']}", decision="deny"
                )
                await waiting
            finally:
                await desk.sidecar.close()
    finally:
        await runner.cleanup()
