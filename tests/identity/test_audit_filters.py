"""The console, the operator API and ``clawc audit show`` filter the audit by end user (SPEC §21),
and show whom each request was for."""

from __future__ import annotations

import io

import aiohttp

from clawpod.cli.clawc import main
from tests.identity.conftest import OPERATOR_TOKEN, DoorPod
from tests.mediation.scripted import oa_text
from tests.operators.console_client import ConsoleClient
from tests.support.sidecar import audit_records_when
from tests.support.upstream import Reply

ASK = [{"role": "user", "content": "hi"}]


async def _ask_for(door: DoorPod, agent: str, user: str | None) -> None:
    door.upstream.enqueue("openai", Reply.json(oa_text(f"for {user}")))
    token = door.user_token(user) if user else None
    await door.openai(door.tokens[agent], end_user=token).chat.completions.create(
        model="gpt-4o", messages=ASK
    )


async def _three_requests(door: DoorPod) -> None:
    await _ask_for(door, "analyst", "alice")
    await _ask_for(door, "ops", "bob")
    await _ask_for(door, "ops", None)
    await audit_records_when(door.state_dir, "ops", 2)


async def test_clawc_audit_show_filters_by_end_user(door: DoorPod) -> None:
    await _three_requests(door)
    await door.sidecar.state.audit.close()  # on disk before clawc reads it
    out = io.StringIO()
    code = main(["audit", "show", str(door.state_dir), "--end-user", "bob"], stdout=out)
    assert code == 0
    shown = out.getvalue()
    assert "for bob" in shown and "for alice" not in shown
    assert shown.count("/v1/chat/completions") == 1


async def test_the_operator_api_and_console_filter_by_end_user(door: DoorPod) -> None:
    await _three_requests(door)
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            door.sidecar.admin_url + "/operator/audit",
            params={"end_user": "alice"},
            headers=headers,
        ) as response,
    ):
        answer = await response.json()
    records = [r for rows in answer["agents"].values() for r in rows]
    assert [(r["agent"], r["end_user"]) for r in records] == [("analyst", "alice")]
    async with ConsoleClient(door.sidecar.admin_url) as console:
        await console.sign_in(OPERATOR_TOKEN)
        _, page, _ = await console.get("/console/audit?end_user=bob")
    assert 'for <span class="end-user">bob</span>' in page
    assert "alice" not in page and page.count('<li class="card record">') == 1
