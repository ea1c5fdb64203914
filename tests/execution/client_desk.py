"""The governance desk (``test_governance.py``) with trades the agent's own user approves
(``approver: client``, SPEC §16): two mediated agents and a native one, a real tool service, a
scripted Responses upstream, the operator's API beside them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.execution.test_governance import ENV, Desk, compile_desk
from tests.support.services import ToolService
from tests.support.sidecar import audit_records, start_sidecar
from tests.support.upstream import StubUpstream

POD = """\
x-claw:
  providers:
    stub: {{api: openai, base-url: "{upstream}", key-env: OPENAI_API_KEY, models: ["*"]}}
  principals:
    desk-trader: {{service: desk, env: DESK_RW_TOKEN}}
  tool-rules:
    - {{tool: desk.execute_trade, effect: confirm, approver: client, reason: "REASON",
       rate: 3/minute}}
  approvals: {{timeout-ms: {timeout_ms}}}
services:
  desk:
    image: example/desk
    x-claw: {{describe: desk.json, url: "{desk}"}}
  analyst:
    image: example/agent
    x-claw:
      agent: {{}}
      tools: [{{service: desk, allow: [get_quote, execute_trade], principal: desk-trader}}]
  helper:
    image: example/agent
    x-claw:
      agent: {{}}
      tools: [{{service: desk, allow: [get_quote, execute_trade], principal: desk-trader}}]
  trader:
    image: example/agent
    x-claw:
      agent: {{}}
      mode: native
      tools: [{{service: desk, allow: [get_quote, execute_trade], principal: desk-trader}}]
"""
TRADE = {"symbol": "NVDA", "side": "buy", "quantity": 10}
REASON = "the user confirms trades"


@dataclass
class ClientDesk(Desk):
    tmp_path: Path = Path()
    timeout_ms: int = 60000

    def openai(self, agent: str = "analyst") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.sidecar.openai_base_url, api_key=self.tokens[agent], max_retries=0
        )

    def audit(self, agent: str = "analyst") -> list[dict[str, Any]]:
        return audit_records(self.state_dir, agent)

    async def requests_audited(self, count: int, agent: str = "analyst") -> list[dict[str, Any]]:
        """The agent's request records once there are ``count`` (each is written after its
        answer went out)."""
        while len(records := [r for r in self.audit(agent) if "route" in r]) < count:
            await asyncio.sleep(0.02)
        return records

    def events(self, event: str, agent: str = "analyst") -> list[dict[str, Any]]:
        return [r for r in self.audit(agent) if r.get("event") == event]

    def sent_inputs(self) -> list[list[dict[str, Any]]]:
        """The ``input`` of every Responses call the upstream received."""
        return [received.json["input"] for received in self.upstream.requests_to("responses")]

    def results_seen(self, call_id: str) -> list[dict[str, Any]]:
        """Every result of ``call_id`` the model was shown, as envelopes."""
        return [
            json.loads(item["output"])
            for sent in self.sent_inputs()
            for item in sent
            if item.get("type") == "function_call_output" and item.get("call_id") == call_id
        ]

    async def restart(self, *, reason: str = REASON) -> None:
        """The sidecar stops and starts again on the same state; another ``reason`` makes
        another build."""
        await self.sidecar.close()
        self.out = compile_client_desk(
            self.tmp_path, self.service, self.upstream, self.timeout_ms, reason
        )[0]
        self.sidecar = await start_sidecar(self.out, self.state_dir, env=ENV)


def compile_client_desk(
    tmp_path: Path, service: ToolService, upstream: StubUpstream, timeout_ms: int, reason: str
) -> tuple[Path, dict[str, str]]:
    text = POD.replace("REASON", reason)
    return compile_desk(tmp_path, service, upstream, pod_text=text, timeout_ms=timeout_ms)


@pytest.fixture
async def desk(tmp_path: Path, service: ToolService, request: Any) -> AsyncIterator[ClientDesk]:
    """``timeout-ms`` of approvals: the test's indirect parameter, else a minute."""
    timeout_ms = getattr(request, "param", 60000)
    async with StubUpstream() as upstream:
        out, tokens = compile_client_desk(tmp_path, service, upstream, timeout_ms, REASON)
        sidecar = await start_sidecar(out, tmp_path / "state", env=ENV)
        running = ClientDesk(
            sidecar, service, upstream, tokens, out, tmp_path / "state", tmp_path, timeout_ms
        )
        try:
            yield running
        finally:
            await running.sidecar.close()
