"""SPEC §9 end to end: a pod compiled by clawc, a real sidecar, a real tool service, the openai
SDK (mediated analyst) and the official MCP client (native trader)."""

from __future__ import annotations

import asyncio
import io
import json
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from clawpod.cli.clawc import main as clawc
from clawpod.sidecar.server.operator.operator_auth import MAX_DELAY_S, SIGN_IN_KEY
from tests.mcp.conftest import mcp_client
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, RunningSidecar, audit_records, start_sidecar
from tests.support.upstream import Reply, StubUpstream

RO_TOKEN = "desk-readonly-secret-1"
RW_TOKEN = "desk-trading-secret-2"
OPERATOR_TOKEN = "operator-secret-3-7f0c2a9e4b6d1e8f3a5c7b9d2e4f6a8c"
DESCRIPTOR = {
    "version": 2,
    "description": "A trading desk.",
    "auth": {"type": "bearer", "env": "DESK_TOKEN"},
    "tools": [
        {
            "name": "get_quote",
            "description": "A quote.",
            "inputSchema": {
                "type": "object",
                "properties": {"symbol": {"type": "string"}},
                "required": ["symbol"],
            },
            "annotations": {"readOnlyHint": True},
            "http": {"method": "GET", "path": "/quotes/{symbol}"},
        },
        {
            "name": "execute_trade",
            "description": "Trade.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "symbol": {"type": "string"},
                    "side": {"enum": ["buy", "sell"]},
                    "quantity": {"type": "number"},
                },
                "required": ["symbol", "side", "quantity"],
            },
            "annotations": {"destructiveHint": True},
            "http": {"method": "POST", "path": "/trades"},
        },
    ],
}
POD = """\
x-claw:
  providers:
    stub: {{api: openai, base-url: "{upstream}", key-env: OPENAI_API_KEY, models: ["*"]}}
  principals:
    desk-readonly: {{service: desk, env: DESK_RO_TOKEN}}
    desk-trader: {{service: desk, env: DESK_RW_TOKEN}}
  tool-rules:
    - {{tool: desk.execute_trade, when: "args.quantity > 100.0", effect: deny, reason: too big}}
    - {{tool: desk.get_quote, when: 'args.symbol.trim().upperAscii() == "GME"', effect: confirm}}
    - {{tool: desk.get_quote, when: 'args.symbol == "HOT"', rate: 2/minute}}
  approvals: {{require: [desk.execute_trade], timeout-ms: {timeout_ms}}}
  budgets: {{analyst: {{tokens-per-day: 20}}}}
services:
  desk:
    image: example/desk
    x-claw: {{describe: desk.json, url: "{desk}"}}
  analyst:
    image: example/agent
    x-claw:
      agent: {{}}
      tools: [{{service: desk, allow: [get_quote], principal: desk-readonly}}]
  trader:
    image: example/agent
    x-claw:
      agent: {{}}
      mode: native
      tools: [{{service: desk, allow: [get_quote, execute_trade], principal: desk-trader}}]
"""
TRADE = {"symbol": "NVDA", "side": "buy", "quantity": 10}


@dataclass
class Desk:
    sidecar: RunningSidecar
    service: ToolService
    upstream: StubUpstream
    tokens: dict[str, str]
    out: Path
    state_dir: Path

    async def operator(self, method: str, path: str, token: str = OPERATOR_TOKEN, **body: Any):
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                method,
                self.sidecar.admin_url + path,
                json=body or None,
                headers={"Authorization": f"Bearer {token}"},
            ) as response,
        ):
            return response.status, await response.json()

    async def pending(self, count: int = 1) -> list[dict[str, Any]]:
        """The pending approvals, once ``count`` of them exist (polled: the call creates it)."""
        while True:
            status, body = await self.operator("GET", "/operator/approvals")
            assert status == 200
            pending = [a for a in body["approvals"] if a["status"] == "pending"]
            if len(pending) >= count:
                return pending
            await asyncio.sleep(0.02)

    async def restart(self) -> None:
        await self.sidecar.close()
        self.sidecar = await start_sidecar(self.out, self.state_dir, env=ENV)


def pass_sign_in_delays(desk: Desk) -> None:
    """Move the operator listener's sign-in clock past any wait a failed attempt imposed, as
    if the peer had waited (tests that try several wrong tokens in a row)."""
    throttle = desk.sidecar.admin.app[SIGN_IN_KEY]
    clock = throttle.clock
    throttle.clock = lambda: clock() + MAX_DELAY_S


ENV = {
    **TEST_PROVIDER_KEYS,
    "DESK_RO_TOKEN": RO_TOKEN,
    "DESK_RW_TOKEN": RW_TOKEN,
    "CLAW_OPERATOR_TOKEN": OPERATOR_TOKEN,
}


def compile_desk(
    tmp_path: Path,
    service: ToolService,
    upstream: StubUpstream,
    *,
    pod_text: str = POD,
    timeout_ms: int,
) -> tuple[Path, dict[str, str]]:
    """The desk's pod file (``pod_text``, a variant of ``POD``) compiled under ``tmp_path``:
    the build and each agent's token."""
    (tmp_path / "desk.json").write_text(json.dumps(DESCRIPTOR))
    pod = tmp_path / "pod.yml"
    pod.write_text(
        textwrap.dedent(pod_text).format(
            upstream=upstream.openai_url, desk=service.url, timeout_ms=timeout_ms
        )
    )
    out = tmp_path / "out"
    quiet = io.StringIO()
    assert clawc(["compile", str(pod), "-o", str(out)], quiet, quiet) == 0, quiet.getvalue()
    tokens = {
        env.stem: env.read_text().split("CLAW_AGENT_TOKEN=")[1].split()[0]
        for env in (out / "agents").glob("*.env")
    }
    return out, tokens


async def compile_and_start(
    tmp_path: Path, service: ToolService, upstream: StubUpstream, timeout_ms: int
) -> Desk:
    out, tokens = compile_desk(tmp_path, service, upstream, timeout_ms=timeout_ms)
    sidecar = await start_sidecar(out, tmp_path / "state", env=ENV)
    return Desk(sidecar, service, upstream, tokens, out, tmp_path / "state")


@pytest.fixture
async def desk(tmp_path: Path, service: ToolService, request: Any) -> AsyncIterator[Desk]:
    timeout_ms = getattr(request, "param", 60000)
    async with StubUpstream() as upstream:
        running = await compile_and_start(tmp_path, service, upstream, timeout_ms)
        try:
            yield running
        finally:
            await running.sidecar.close()


async def ask_analyst(desk: Desk, *calls: tuple[str, str, dict[str, Any]]) -> list[dict]:
    """One mediated request whose model makes ``calls``; returns the tool results it saw."""
    desk.upstream.enqueue("openai", Reply.json(oa_calls(*calls)), Reply.json(oa_text("done", 1)))
    client = openai.AsyncOpenAI(
        base_url=desk.sidecar.openai_base_url, api_key=desk.tokens["analyst"], max_retries=0
    )
    try:
        await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "go"}]
        )
    finally:
        await client.close()
    sent = desk.upstream.requests_to("openai")[-1].json
    return [json.loads(m["content"]) for m in sent["messages"] if m["role"] == "tool"]


async def trade(desk: Desk, arguments: dict[str, Any], tool: str = "desk_execute_trade"):
    async with mcp_client(desk.sidecar.url + "/mcp", desk.tokens["trader"]) as client:
        result = await client.call_tool(tool, arguments)
    return result.structured_content


async def test_each_agent_calls_with_its_principals_credential(desk: Desk) -> None:
    results = await ask_analyst(desk, ("c1", "desk_get_quote", {"symbol": "NVDA"}))
    assert results[0]["ok"] is True
    quote = await trade(desk, {"symbol": "NVDA"}, tool="desk_get_quote")
    assert quote["ok"] is True
    seen = [r.headers["Authorization"] for r in desk.service.requests]
    assert seen == [f"Bearer {RO_TOKEN}", f"Bearer {RW_TOKEN}"]


async def test_rules_deny_and_allow_on_argument_values(desk: Desk) -> None:
    denied = await trade(desk, {**TRADE, "quantity": 500})
    assert denied["error"] == {"code": "policy_denied", "message": "too big"}
    results = await ask_analyst(desk, ("c1", "desk_get_quote", {"symbol": "NVDA"}))
    assert results[0]["ok"] is True  # no rule matches NVDA: allowed
    assert [r.path for r in desk.service.requests] == ["/quotes/NVDA"]


async def test_confirm_rule_waits_for_the_operator_in_mediated_mode(desk: Desk) -> None:
    asking = asyncio.ensure_future(ask_analyst(desk, ("c1", "desk_get_quote", {"symbol": "GME"})))
    [approval] = await desk.pending()
    assert (approval["agent"], approval["tool"]) == ("analyst", "desk.get_quote")
    assert approval["arguments"] == {"symbol": "GME"}
    status, _ = await desk.operator(
        "POST", f"/operator/approvals/{approval['id']}", decision="approve", reason="ok"
    )
    assert status == 200
    results = await asking
    assert results[0]["ok"] is True
    assert [r.path for r in desk.service.requests] == ["/quotes/GME"]


@pytest.mark.parametrize("symbol", ["gme", "Gme ", " GME"])
async def test_a_confirm_rule_holds_whatever_the_case_or_spacing_of_the_value(
    desk: Desk, symbol: str
) -> None:
    # With the documented `args.symbol == "GME"`, "gme" skipped the confirm rule and ran.
    asking = asyncio.ensure_future(ask_analyst(desk, ("c1", "desk_get_quote", {"symbol": symbol})))
    [approval] = await desk.pending()
    assert approval["arguments"] == {"symbol": symbol}
    status, _ = await desk.operator(
        "POST", f"/operator/approvals/{approval['id']}", decision="deny", reason="no meme stocks"
    )
    assert status == 200
    results = await asking
    assert results[0]["ok"] is False
    assert desk.service.requests == []


async def test_rate_limits_per_agent_and_tool(desk: Desk) -> None:
    outcomes = [
        (await trade(desk, {"symbol": "HOT"}, tool="desk_get_quote"))["ok"] for _ in range(3)
    ]
    assert outcomes == [True, True, False]
    limited = await trade(desk, {"symbol": "HOT"}, tool="desk_get_quote")
    assert limited["error"]["code"] == "rate_limited"
    other = await trade(desk, {"symbol": "NVDA"}, tool="desk_get_quote")  # no rate rule
    assert other["ok"] is True


async def test_an_approved_call_runs_once_and_only_as_approved(desk: Desk) -> None:
    calling = asyncio.ensure_future(trade(desk, TRADE))
    [approval] = await desk.pending()
    assert approval["args_digest"] and approval["manifest_digest"]
    await desk.operator("POST", f"/operator/approvals/{approval['id']}", decision="approve")
    assert (await calling)["ok"] is True
    assert len(desk.service.requests) == 1
    # Used once: the same call again needs a new approval; deny that one.
    again = asyncio.ensure_future(trade(desk, TRADE))
    [second] = await desk.pending()
    assert second["id"] != approval["id"]
    status, _ = await desk.operator(
        "POST", f"/operator/approvals/{approval['id']}", decision="approve"
    )
    assert status == 409  # the spent approval cannot be decided again
    await desk.operator("POST", f"/operator/approvals/{second['id']}", decision="deny", reason="no")
    denied = await again
    assert denied["error"]["code"] == "approval_denied" and "no" in denied["error"]["message"]
    assert len(desk.service.requests) == 1
    events = [r for r in audit_records(desk.state_dir, "trader") if r.get("event")]
    decisions = [(e["approval"], e["decision"], e["who"]) for e in events]
    assert decisions == [
        (approval["id"], "approved", "operator"),
        (second["id"], "denied", "operator"),
    ]
    metrics = desk.sidecar.state.metrics.render()[0].decode()
    assert 'claw_approvals_total{event="approved"} 1.0' in metrics


async def test_changed_arguments_need_their_own_approval(desk: Desk) -> None:
    first = asyncio.ensure_future(trade(desk, TRADE))
    [approval] = await desk.pending()
    changed = asyncio.ensure_future(trade(desk, {**TRADE, "quantity": 11}))
    pending = await desk.pending(2)
    other = next(a for a in pending if a["id"] != approval["id"])
    assert other["args_digest"] != approval["args_digest"]
    await desk.operator("POST", f"/operator/approvals/{approval['id']}", decision="approve")
    assert (await first)["ok"] is True
    assert not changed.done()  # still waiting for its own approval
    await desk.operator("POST", f"/operator/approvals/{other['id']}", decision="deny")
    assert (await changed)["error"]["code"] == "approval_denied"
    assert [r.json()["quantity"] for r in desk.service.requests] == [10]


async def test_arguments_too_large_to_keep_for_an_approval_are_refused_before_it(
    desk: Desk,
) -> None:
    """Eight 4 MB calls that need an approval held 34 MB on disk and 119 MB in memory until
    decided (issue 46): such a call is refused before anything is stored."""
    huge = {**TRADE, "symbol": "N" * 4_000_000}
    for _ in range(8):
        refused = await trade(desk, huge)
        assert refused["error"]["code"] == "approval_arguments_too_large"
        assert f"at most {256 * 1024}" in refused["error"]["message"]
    status, body = await desk.operator("GET", "/operator/approvals")
    assert status == 200 and body["approvals"] == []
    assert not any((desk.state_dir / "approvals").glob("*.json"))
    assert desk.service.requests == []
    # The bound is on what is kept: a call under it is still asked about.
    asking = asyncio.ensure_future(trade(desk, {**TRADE, "symbol": "N" * 200_000}))
    [approval] = await desk.pending()
    await desk.operator("POST", f"/operator/approvals/{approval['id']}", decision="deny")
    assert (await asking)["error"]["code"] == "approval_denied"


@pytest.mark.parametrize("desk", [300], indirect=True)
async def test_an_unanswered_approval_expires(desk: Desk) -> None:
    expired = await trade(desk, TRADE)
    assert expired["error"]["code"] == "approval_expired"
    assert desk.service.requests == []
    decided = [r["decision"] for r in audit_records(desk.state_dir, "trader") if r.get("event")]
    assert decided == ["expired"]


async def test_a_pending_approval_survives_a_restart(desk: Desk) -> None:
    calling = asyncio.ensure_future(trade(desk, TRADE))
    [approval] = await desk.pending()
    await desk.restart()  # the waiting call gives up; the approval stays on disk
    try:
        answered = await calling
    except Exception:  # the connection may close before the answer
        answered = None
    assert answered is None or answered["error"]["code"] == "approval_pending"
    [still] = await desk.pending()
    assert still["id"] == approval["id"]
    await desk.operator("POST", f"/operator/approvals/{approval['id']}", decision="approve")
    # The client retries the same call: it runs on the approval given after the restart.
    assert (await trade(desk, TRADE))["ok"] is True
    assert len(desk.service.requests) == 1


async def test_the_operator_api_refuses_agent_tokens(desk: Desk) -> None:
    for agent in ("analyst", "trader"):
        pass_sign_in_delays(desk)
        status, body = await desk.operator("GET", "/operator/approvals", token=desk.tokens[agent])
        assert (status, body["error"]["code"]) == (403, "agent_token_refused")
    pass_sign_in_delays(desk)  # each wrong token makes the next attempt wait
    status, _ = await desk.operator("GET", "/operator/approvals", token="guess")
    assert status == 403


async def test_a_spent_budget_is_429_in_the_callers_protocol(desk: Desk) -> None:
    await ask_analyst(desk, ("c1", "desk_get_quote", {"symbol": "NVDA"}))  # 13 + 4 tokens
    await ask_analyst(desk, ("c2", "desk_get_quote", {"symbol": "AMD"}))  # passes: 17 < 20
    client = openai.AsyncOpenAI(
        base_url=desk.sidecar.openai_base_url, api_key=desk.tokens["analyst"], max_retries=0
    )
    with pytest.raises(openai.RateLimitError) as raised:
        await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "go"}]
        )
    await client.close()
    assert raised.value.code == "budget_exhausted"
    metrics = desk.sidecar.state.metrics.render()[0].decode()
    assert 'claw_budget_refusals_total{agent="analyst"} 1.0' in metrics


async def test_clawc_approvals_lists_and_approves(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAW_OPERATOR_TOKEN", OPERATOR_TOKEN)
    calling = asyncio.ensure_future(trade(desk, TRADE))
    [approval] = await desk.pending()

    def clawc_run(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        return clawc(
            ["approvals", *argv, "--sidecar", desk.sidecar.admin_url], out, out
        ), out.getvalue()

    code, listed = await asyncio.to_thread(clawc_run, "list")
    assert code == 0 and approval["id"] in listed and "desk.execute_trade" in listed
    code, decided = await asyncio.to_thread(clawc_run, "approve", approval["id"])
    assert (code, decided.strip()) == (0, f"{approval['id']}: approved")
    assert (await calling)["ok"] is True
    monkeypatch.setenv("CLAW_OPERATOR_TOKEN", desk.tokens["trader"])
    code, refused = await asyncio.to_thread(clawc_run, "list")
    assert code == 1 and "agent tokens cannot use the operator API" in refused
