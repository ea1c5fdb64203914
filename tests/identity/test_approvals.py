"""Approvals for an end user's calls (SPEC §21): the operator sees whom a held call acts for, the
decision's audit record names the end user, and one end user's approval never clears another's
identical call (each waits on its own)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from clawpod.sidecar.manifest import Approvals, Governance
from tests.identity.conftest import OPERATOR_TOKEN, DoorFactory, DoorPod
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.sidecar import audit_records_when
from tests.support.upstream import Reply

TRADE = {"symbol": "AAPL", "side": "buy", "quantity": 1}
GUARD_S = 30.0  # against a hang, never a timing assertion


async def operator(pod: DoorPod, method: str, path: str, **body: Any) -> Any:
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, pod.sidecar.admin_url + path, json=body or None, headers=headers
        ) as response,
    ):
        return await response.json()


async def pending(pod: DoorPod, count: int) -> list[dict[str, Any]]:
    for _ in range(int(GUARD_S / 0.05)):
        listed = (await operator(pod, "GET", "/operator/approvals"))["approvals"]
        waiting = [a for a in listed if a["status"] == "pending"]
        if len(waiting) >= count:
            return waiting
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected {count} pending approvals")


async def test_each_end_users_call_waits_on_its_own_approval(make_door: DoorFactory) -> None:
    door = await make_door(governance=Governance(approvals=Approvals(require=["desk.trade"])))
    calls = Reply.json(oa_calls(("c1", "desk_trade", TRADE)))
    door.upstream.enqueue("openai", calls, calls, Reply.json(oa_text("done")))
    door.upstream.enqueue("openai", Reply.json(oa_text("done")))

    async def ask_for(user: str) -> Any:
        client = door.openai(door.tokens["analyst"], end_user=door.user_token(user))
        return await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "buy one AAPL"}]
        )

    asks = [asyncio.create_task(ask_for(user)) for user in ("alice", "bob")]
    waiting = await pending(door, 2)  # the same call, two end users: two approvals
    by_user = {a["end_user"]: a for a in waiting}
    assert set(by_user) == {"alice", "bob"}
    alice, bob = by_user["alice"]["id"], by_user["bob"]["id"]
    await operator(door, "POST", f"/operator/approvals/{alice}", decision="approve")
    await operator(door, "POST", f"/operator/approvals/{bob}", decision="deny", reason="no")
    await asyncio.wait_for(asyncio.gather(*asks), GUARD_S)
    assert [r.raw_path for r in door.service.requests] == ["/trades"]  # alice's only
    records = await audit_records_when(door.state_dir, "analyst", 4)
    decided = {r["end_user"]: r["decision"] for r in records if r.get("event")}
    assert decided == {"alice": "approved", "bob": "denied"}
    requests = {r["end_user"]: r for r in records if not r.get("event")}
    (alices,) = requests["alice"]["tool_trace"][0]["calls"]
    (bobs,) = requests["bob"]["tool_trace"][0]["calls"]
    assert (alices["executed"], bobs["error_code"]) == (True, "approval_denied")
