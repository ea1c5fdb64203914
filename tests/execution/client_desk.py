"""A compiled pod whose trades the agent's own user approves (``approver: client``, SPEC §16):
two mediated agents and a native one, a real tool service, a scripted Responses upstream."""

from __future__ import annotations

import io
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from clawpod.compiler.cli import main as clawc
from tests.execution.test_governance import DESCRIPTOR, ENV
from tests.support.services import ToolService
from tests.support.sidecar import RunningSidecar, audit_records, start_sidecar
from tests.support.upstream import StubUpstream

DESK_TOKEN = "desk-service-secret-4"
CLIENT_ENV = {**ENV, "DESK_TOKEN": DESK_TOKEN}
AGENTS = ("analyst", "helper", "trader")
POD = """\
x-claw:
  providers:
    stub: {{api: openai, base-url: "{upstream}", key-env: OPENAI_API_KEY, models: ["*"]}}
  tool-rules:
    - {{tool: desk.execute_trade, effect: confirm, approver: client, reason: "{reason}",
       rate: 3/minute}}
  approvals: {{timeout-ms: {timeout_ms}}}
services:
  desk:
    image: example/desk
    x-claw: {{describe: desk.json, url: "{desk}"}}
  analyst:
    image: example/agent
    x-claw: {{agent: {{}}, tools: [{{service: desk, allow: [get_quote, execute_trade]}}]}}
  helper:
    image: example/agent
    x-claw: {{agent: {{}}, tools: [{{service: desk, allow: [get_quote, execute_trade]}}]}}
  trader:
    image: example/agent
    x-claw:
      agent: {{}}
      mode: native
      tools: [{{service: desk, allow: [get_quote, execute_trade]}}]
"""
TRADE = {"symbol": "NVDA", "side": "buy", "quantity": 10}
REASON = "the user confirms trades"


@dataclass
class ClientDesk:
    sidecar: RunningSidecar
    service: ToolService
    upstream: StubUpstream
    tokens: dict[str, str]
    tmp_path: Path
    timeout_ms: int

    @property
    def state_dir(self) -> Path:
        return self.tmp_path / "state"

    def openai(self, agent: str = "analyst") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.sidecar.openai_base_url, api_key=self.tokens[agent], max_retries=0
        )

    def audit(self, agent: str = "analyst") -> list[dict[str, Any]]:
        return audit_records(self.state_dir, agent)

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
        out = compile_client_desk(self.tmp_path, self.service, self.upstream, reason=reason)[0]
        self.sidecar = await start_sidecar(out, self.state_dir, env=CLIENT_ENV)


def compile_client_desk(
    tmp_path: Path,
    service: ToolService,
    upstream: StubUpstream,
    *,
    timeout_ms: int = 60000,
    reason: str = REASON,
) -> tuple[Path, dict[str, str]]:
    (tmp_path / "desk.json").write_text(json.dumps(DESCRIPTOR))
    pod = tmp_path / "pod.yml"
    text = POD.format(
        upstream=upstream.openai_url, desk=service.url, timeout_ms=timeout_ms, reason=reason
    )
    pod.write_text(textwrap.dedent(text))
    out = tmp_path / "out"
    quiet = io.StringIO()
    assert clawc(["compile", str(pod), "-o", str(out)], quiet, quiet) == 0, quiet.getvalue()
    tokens = {
        agent: (out / "agents" / f"{agent}.env")
        .read_text()
        .split("CLAW_AGENT_TOKEN=")[1]
        .split()[0]
        for agent in AGENTS
    }
    return out, tokens


async def start_client_desk(
    tmp_path: Path, service: ToolService, upstream: StubUpstream, timeout_ms: int
) -> ClientDesk:
    out, tokens = compile_client_desk(tmp_path, service, upstream, timeout_ms=timeout_ms)
    sidecar = await start_sidecar(out, tmp_path / "state", env=CLIENT_ENV)
    return ClientDesk(sidecar, service, upstream, tokens, tmp_path, timeout_ms)
