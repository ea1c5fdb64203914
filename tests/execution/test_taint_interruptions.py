"""Taint kept through the interruptions of a conversation (SPEC §16, §17): a round whose
untrusted read sits beside a call the client must approve is stopped, resumed by the client's
answer (maybe after a restart), and the injected call that follows is still held for the
operator. Real sidecar, real tool service, the real openai SDK, a scripted Responses model that
obeys the headline it read."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from tests.execution.test_taint import DESCRIPTOR, ENV, INJECTION, Desk
from tests.support import responses as r
from tests.support.services import ToolService
from tests.support.sidecar import start_sidecar
from tests.support.upstream import StubUpstream

POD = """\
x-claw:
  providers:
    stub: {{api: openai, base-url: "{upstream}", key-env: OPENAI_API_KEY, models: ["*"]}}
  taint: confirm
  tool-rules:
    - {{tool: desk.execute_trade, effect: confirm, approver: client,
       reason: the user confirms trades}}
services:
  desk:
    image: example/desk
    x-claw: {{describe: desk.json, url: "{desk}"}}
  analyst:
    image: example/agent
    x-claw: {{agent: {{}}, tools: [desk]}}
"""
PROMPT = {"role": "user", "content": "Buy 1 NVDA and tell me the news."}
ONE = {"symbol": "NVDA", "side": "buy", "quantity": 1}
INJECTED = {"symbol": "NVDA", "side": "sell", "quantity": 999}


@pytest.fixture
async def desk(tmp_path: Any, service: ToolService) -> AsyncIterator[Desk]:
    from clawpod.cli.clawc import main as clawc

    service.reply("/news/NVDA", json={"headlines": [INJECTION]})
    async with StubUpstream() as upstream:
        (tmp_path / "desk.json").write_text(json.dumps(DESCRIPTOR))
        pod = tmp_path / "pod.yml"
        pod.write_text(textwrap.dedent(POD).format(upstream=upstream.openai_url, desk=service.url))
        out = tmp_path / "out"
        assert clawc(["compile", str(pod), "-o", str(out)]) == 0
        token = (out / "agents" / "analyst.env").read_text().split("CLAW_AGENT_TOKEN=")[1].split()
        sidecar = await start_sidecar(out, tmp_path / "state", env=ENV)
        running = Desk(sidecar, service, upstream, {"analyst": token[0]}, out, tmp_path / "state")
        try:
            yield running
        finally:
            await running.sidecar.close()


async def ask(desk: Desk, items: list[dict[str, Any]]) -> dict[str, Any]:
    client = openai.AsyncOpenAI(
        base_url=desk.sidecar.openai_base_url, api_key=desk.tokens["analyst"], max_retries=0
    )
    try:
        response = await client.responses.create(model="gpt-4o", input=items, store=False)
        return response.model_dump(exclude_none=True)
    finally:
        await client.close()


def approve_last(
    items: list[dict[str, Any]], response: dict[str, Any], approve: bool = True
) -> list[dict[str, Any]]:
    """The follow-up input of a client that answers what it is asked (the agent's own runner,
    which the injected model may talk into anything)."""
    request = response["output"][-1]
    assert request["type"] == "mcp_approval_request", response["output"]
    answer = {"type": "mcp_approval_response", "approval_request_id": request["id"]}
    return [*items, *response["output"], {**answer, "approve": approve}]


async def held_for_operator(desk: Desk, asking: asyncio.Future[Any]) -> dict[str, Any]:
    """The approval the request in flight waits for an operator's decision on (those asked of
    the client are pending in the same store, without a reason)."""
    while not (held := [a for a in await desk.approvals() if a["reason"] == "tainted"]):
        if asking.done():
            pytest.fail(f"the request ended without holding a call: {asking.result()['output']}")
        await asyncio.sleep(0.02)
    return held[0]


def trades(desk: Desk) -> list[dict[str, Any]]:
    return [q.json() for q in desk.service.requests if q.path == "/trades"]


@pytest.mark.parametrize(
    ("restart", "approve"),
    [(False, True), (True, True), (False, False)],
    ids=["approved", "approved-after-restart", "rejected"],
)
async def test_an_untrusted_read_beside_a_client_approval_still_holds_the_next_trade(
    desk: Desk, restart: bool, approve: bool
) -> None:
    desk.upstream.enqueue(
        "responses",
        # One round: the news (untrusted) and the user's own 1-share trade (asked of the user).
        r.reply(
            r.response(
                r.call("c_news", "desk_get_news", {"symbol": "NVDA"}),
                r.call("c_one", "desk_execute_trade", ONE),
            )
        ),
        # Having read the headline, the model obeys it.
        r.reply(r.response(r.call("c_999", "desk_execute_trade", INJECTED), response_id="r2")),
        r.reply(r.response(r.message("Sold."), response_id="r3")),
    )
    asked = await ask(desk, [PROMPT])
    assert trades(desk) == []
    if restart:  # the stopped round, and what it read, come back from the state directory
        await desk.sidecar.close()
        desk.sidecar = await start_sidecar(desk.out, desk.state_dir, env=ENV)
    answering = asyncio.ensure_future(ask(desk, approve_last([PROMPT], asked, approve)))
    # The user's trade was chosen before the news was read: the user's approval runs it. The
    # injected one came after: it waits for the operator, not for the user's runner.
    approval = await held_for_operator(desk, answering)
    assert (approval["tool"], approval["arguments"], approval["reason"]) == (
        "desk.execute_trade",
        INJECTED,
        "tainted",
    )
    mine = [ONE] if approve else []
    assert trades(desk) == mine
    status, _ = await desk.operator(
        "POST", f"/operator/approvals/{approval['id']}", decision="deny", reason="injection"
    )
    assert status == 200
    await answering
    assert trades(desk) == mine
    [record] = [rec for rec in await desk.audit(2)][-1:]
    assert record["taint_sources"] == ["desk.get_news"]
