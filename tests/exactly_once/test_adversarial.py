"""Exactly once when an agent tries to break it (issue 32): another agent's failures, reused
call ids, approvals across a restart and past the request's tool budget."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp

from clawpod.sidecar.manifest import Approvals, Governance, ToolPolicy
from tests.mediation.conftest import MediatedPod, PodFactory
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.upstream import Reply

BUY = {"symbol": "AAPL", "side": "buy", "quantity": 1}


def trades(pod: MediatedPod) -> list[Any]:
    return [r for r in pod.service.requests if r.path == "/trades"]


async def post(
    pod: MediatedPod, ask: str, agent: str = "analyst"
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """A client that sends the same request again by hand, whatever the headers say."""
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": ask}]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            pod.sidecar.openai_base_url + "/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {pod.tokens[agent]}"},
        ) as response,
    ):
        return response.status, await response.json(), dict(response.headers)


async def test_another_agents_failures_cannot_evict_a_journal(pod: MediatedPod) -> None:
    """The journal bound scaled down from 10,000 to 20: once pod-wide, so the flood of another
    agent's failed requests pushed the victim's journal out and its retry traded twice."""
    pod.sidecar.state.journal.max_journals = 20
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.error("openai", 500, "provider down"),
    )
    assert (await post(pod, "Buy one AAPL."))[0] == 502
    for n in range(25):  # each a different request of ops whose restart ran, then failed
        pod.upstream.enqueue(
            "openai",
            Reply.json(oa_calls((f"r{n}", "ops_restart", {}))),
            Reply.error("openai", 500, "provider down"),
        )
        await post(pod, f"Restart it, take {n}.", agent="ops")
    pod.sidecar.state.journal._pruned_at = float("-inf")  # the next request prunes
    # A model that does not see the order placed places it again (a resumed attempt shows it
    # the order: its repeat is refused as a duplicate).
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.json(oa_text("Bought.")),
    )
    status, answer, _ = await post(pod, "Buy one AAPL.")
    assert status == 200, answer
    assert len(trades(pod)) == 1
    # The flood is bounded by ops's own share: past it, ops's restarts are not sent at all.
    restarts = [r for r in pod.service.requests if r.path != "/trades"]
    assert len(restarts) == 20 // 2


async def test_a_reused_call_id_never_repeats_an_idempotency_key(pod: MediatedPod) -> None:
    """A model that names every call ``call_0`` (llama-cpp-python) and a user who really buys
    twice: two orders, two keys, so a service that honours the header keeps both."""
    for _ in range(2):
        pod.upstream.enqueue(
            "openai",
            Reply.json(oa_calls(("call_0", "desk_trade", BUY))),
            Reply.json(oa_text("Bought.")),
        )
        assert (await post(pod, "Buy one AAPL."))[0] == 200
    keys = [t.headers["Idempotency-Key"] for t in trades(pod)]
    assert len(keys) == 2 and keys[0] != keys[1]


def approving_pod(make_pod: PodFactory, **policy: Any) -> Any:
    governance = Governance(approvals=Approvals(require=["desk.trade"], timeout_ms=60000))
    limits = {"timeout_per_tool_ms": 60000, "total_timeout_ms": 60000} | policy
    return make_pod(governance=governance, policy=ToolPolicy(**limits))


async def pending(pod: MediatedPod) -> str:
    for _ in range(500):
        waiting = [
            a for a in pod.sidecar.state.governed.approvals.listing() if a.status == "pending"
        ]
        if waiting:
            return waiting[0].id
        await asyncio.sleep(0.01)
    raise AssertionError("no approval was asked for")


async def test_an_approval_given_after_a_restart_runs_the_call_once(
    make_pod: PodFactory,
) -> None:
    """The retry resumes the journaled round; the call waiting for approval when the sidecar
    stopped runs on the approval given since (it was journaled as a final answer before)."""
    pod = await approving_pod(make_pod)
    pod.upstream.enqueue("openai", Reply.json(oa_calls(("t1", "desk_trade", BUY))))
    first = asyncio.ensure_future(post(pod, "Buy one AAPL."))
    approval = await pending(pod)
    await pod.restart()
    # The stopping sidecar cuts the exchange, or its next model call finds no answer.
    with contextlib.suppress(aiohttp.ClientError):
        assert (await first)[0] >= 500
    await pod.sidecar.state.governed.decide(approval, "approve", None, "operator")
    pod.upstream.enqueue("openai", Reply.json(oa_text("Bought.")))
    status, answer, _ = await post(pod, "Buy one AAPL.")
    assert status == 200, answer
    assert len(trades(pod)) == 1


async def test_an_approval_after_the_tool_budget_never_executes(make_pod: PodFactory) -> None:
    """The request stops waiting when its tool budget is spent: the call is not made, and the
    client's 504 (not to be retried) is what happened; approving later changes nothing."""
    pod = await approving_pod(make_pod, timeout_per_tool_ms=500, total_timeout_ms=500)
    pod.upstream.enqueue(
        "openai",
        Reply.json(oa_calls(("t1", "desk_trade", BUY))),
        Reply.json(oa_text("Too late.")),
    )
    answering = asyncio.ensure_future(post(pod, "Buy one AAPL."))
    approval = await pending(pod)
    await asyncio.sleep(0.7)  # past the budget
    await pod.sidecar.state.governed.decide(approval, "approve", None, "operator")
    status, answer, headers = await asyncio.wait_for(answering, 10)
    await asyncio.sleep(0.2)
    assert trades(pod) == []
    assert status == 504 and answer["error"]["code"] == "timeout"
    assert headers.get("x-should-retry") == "false"
    [record] = [r for r in await pod.wait_for_audit(2) if "tool_trace" in r]
    [call] = record["tool_trace"][0]["calls"]
    assert (call["executed"], call["error_code"]) == (False, "approval_pending")
