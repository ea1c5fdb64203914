"""Approvals under load (issue 30): one agent cannot open approvals without bound, an operator's
listing and the webhook carry a 64 KiB preview of huge arguments plus their digest, and a
SIGTERM with calls waiting for an operator answers each of them in its protocol and exits
within Docker's 10 s grace (a real sidecar process)."""

from __future__ import annotations

import asyncio
import signal
import textwrap
import time
from pathlib import Path
from typing import Any

import openai
import orjson

from clawpod.sidecar.state.approvals import ARGUMENTS_PREVIEW_BYTES, args_digest
from tests.execution.test_governance import ENV, OPERATOR_TOKEN, POD, Desk, compile_desk
from tests.mcp.conftest import mcp_client
from tests.mediation.scripted import oa_calls, oa_text
from tests.operators.desk import WEBHOOK_SECRET
from tests.support.services import ToolService
from tests.support.sidecar import start_sidecar
from tests.support.sidecar_process import sidecar_process
from tests.support.upstream import Reply, StubUpstream

CAP = 3
HOOK_ENV = {**ENV, "CLAW_WEBHOOK_SECRET": WEBHOOK_SECRET}  # the webhook is signed (SPEC §15)
DOCKER_GRACE_S = 10.0  # what `docker stop` waits before SIGKILL: the bound the issue sets
WAITERS_GUARD_S = 30.0  # against a hang, never a timing assertion


def _compile(tmp_path: Path, service: ToolService, upstream: StubUpstream) -> tuple[Path, dict]:
    """The governance desk, its approvals capped at ``CAP`` per agent and posted to a webhook
    (the tool service records what it gets)."""
    pod_text = textwrap.dedent(POD).replace(
        "timeout-ms: {timeout_ms}}}",
        f'timeout-ms: {{timeout_ms}}, max-open-per-agent: {CAP}, webhook: "{{desk}}/hook"}}}}',
    )
    return compile_desk(tmp_path, service, upstream, pod_text=pod_text, timeout_ms=60000)


async def _trade(url: str, token: str, quantity: float, symbol: str = "NVDA") -> dict[str, Any]:
    async with mcp_client(url + "/mcp", token) as client:
        result = await client.call_tool(
            "desk_execute_trade", {"symbol": symbol, "side": "buy", "quantity": quantity}
        )
    return result.structured_content


async def test_an_approval_flood_is_refused_past_the_cap(
    tmp_path: Path, service: ToolService
) -> None:
    async with StubUpstream() as upstream:
        out, tokens = _compile(tmp_path, service, upstream)
        sidecar = await start_sidecar(out, tmp_path / "state", env=HOOK_ENV)
        desk = Desk(sidecar, service, upstream, tokens, out, tmp_path / "state")
        try:
            waiting = [
                asyncio.ensure_future(_trade(sidecar.url, tokens["trader"], n)) for n in range(1, 4)
            ]
            await desk.pending(CAP)
            # Past the cap: refused at once, in the caller's protocol (an MCP error result).
            refused = await asyncio.wait_for(
                _trade(sidecar.url, tokens["trader"], 50), WAITERS_GUARD_S
            )
            assert refused["ok"] is False
            assert refused["error"]["code"] == "approval_limit"
            assert len(await desk.pending()) == CAP
        finally:
            await sidecar.close()  # the waiters are answered as the sidecar stops
        for answer in await asyncio.wait_for(asyncio.gather(*waiting), WAITERS_GUARD_S):
            assert answer["error"]["code"] == "approval_pending"
    assert not [r for r in service.requests if r.path == "/trades"]


async def test_huge_arguments_are_listed_and_posted_as_a_preview_and_a_digest(
    tmp_path: Path, service: ToolService
) -> None:
    async with StubUpstream() as upstream:
        out, tokens = _compile(tmp_path, service, upstream)
        sidecar = await start_sidecar(out, tmp_path / "state", env=HOOK_ENV)
        desk = Desk(sidecar, service, upstream, tokens, out, tmp_path / "state")
        symbol = "X" * (200 * 1024)  # over the preview, under what an approval may keep
        try:
            waiting = asyncio.ensure_future(_trade(sidecar.url, tokens["trader"], 1, symbol))
            [listed] = await desk.pending()
            while not [r for r in service.requests if r.path == "/hook"]:
                await asyncio.sleep(0.02)
        finally:
            await sidecar.close()
        await asyncio.wait_for(waiting, WAITERS_GUARD_S)
    [hook] = [r for r in service.requests if r.path == "/hook"]
    arguments = {"symbol": symbol, "side": "buy", "quantity": 1}
    for shown in (listed, hook.json()):
        assert "arguments" not in shown
        assert len(shown["arguments_preview"].encode()) <= ARGUMENTS_PREVIEW_BYTES
        assert shown["arguments_bytes"] > len(symbol)
        assert shown["args_digest"] == args_digest(arguments)
    assert len(hook.body) < 2 * ARGUMENTS_PREVIEW_BYTES


async def _operator_pending(session: Any, admin_url: str, count: int) -> None:
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    while True:
        async with session.get(admin_url + "/operator/approvals", headers=headers) as response:
            listed = (await response.json())["approvals"]
        if len([a for a in listed if a["status"] == "pending"]) >= count:
            return
        await asyncio.sleep(0.05)


async def _streamed_answer(url: str, token: str) -> list[Any]:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=token, max_retries=0)
    try:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "GME?"}], stream=True
        )
        return [chunk async for chunk in stream]
    finally:
        await client.close()


async def test_sigterm_answers_every_waiter_and_exits_in_time(
    tmp_path: Path, service: ToolService
) -> None:
    import aiohttp

    async with StubUpstream() as upstream:
        out, tokens = _compile(tmp_path, service, upstream)
        # The analyst's model asks for a quote that needs confirming, then answers.
        upstream.enqueue(
            "openai",
            Reply.json(oa_calls(("c1", "desk_get_quote", {"symbol": "GME"}))),
            Reply.json(oa_text("no quote today")),
        )
        async with sidecar_process(out, tmp_path / "state", HOOK_ENV) as sidecar:
            trades = [
                asyncio.ensure_future(_trade(sidecar.url, tokens["trader"], n))
                for n in range(1, CAP + 1)
            ]
            streamed = asyncio.ensure_future(_streamed_answer(sidecar.url, tokens["analyst"]))
            async with aiohttp.ClientSession() as session:
                await asyncio.wait_for(
                    _operator_pending(session, sidecar.admin_url, CAP + 1), WAITERS_GUARD_S
                )
            signalled = time.monotonic()
            sidecar.process.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(sidecar.process.wait(), WAITERS_GUARD_S)
            took = time.monotonic() - signalled
        assert code == 0
        assert took < DOCKER_GRACE_S, f"the sidecar took {took:.1f} s to stop"
        for answer in await asyncio.wait_for(asyncio.gather(*trades), WAITERS_GUARD_S):
            assert answer["error"]["code"] == "approval_pending"
        chunks = await asyncio.wait_for(streamed, WAITERS_GUARD_S)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "no quote today"  # a whole stream: the model saw the refusal and answered
        sent = upstream.requests_to("openai")[-1].json
        results = [orjson.loads(m["content"]) for m in sent["messages"] if m["role"] == "tool"]
        assert results[0]["error"]["code"] == "approval_pending"
