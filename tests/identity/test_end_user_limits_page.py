"""The console's limits page shows end users' spending today and their rates where the pod sets
``end-user-limits`` (SPEC §21): the ones spending most, and a count of the rest (bounded)."""

from __future__ import annotations

import re

import pytest

from clawpod.sidecar.manifest import EndUserLimits, Governance, Rate
from tests.identity.conftest import OPERATOR_TOKEN, DoorFactory, DoorPod
from tests.mediation.scripted import oa_text
from tests.operators.console_client import ConsoleClient
from tests.support.upstream import Reply


async def spend(door: DoorPod, user: str, tokens: int) -> None:
    door.upstream.enqueue("openai", Reply.json(oa_text("ok", tokens=tokens)))
    client = door.openai(door.tokens["analyst"], end_user=door.user_token(user))
    await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )


def row_of(page: str, user: str) -> list[str]:
    row = page[page.index(f"<td>{user}</td>") :].split("</tr>")[0]
    return [re.sub(r"<[^>]+>|\s+", " ", cell).strip() for cell in row.split("</td>")[:-1]]


async def test_the_limits_page_lists_the_end_users_spending_most_and_counts_the_rest(
    make_door: DoorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "clawpod.sidecar.server.operator.console_data.TOP_END_USERS", 2, raising=False
    )
    limits = EndUserLimits(tokens_per_day=1000, requests=Rate(count=5, per="hour"))
    door = await make_door(governance=Governance(end_user_limits=limits))
    for user, tokens in [("carol", 47), ("alice", 297), ("bob", 147), ("alice", 97)]:
        await spend(door, user, tokens)
    async with ConsoleClient(door.sidecar.admin_url) as console:
        await console.sign_in(OPERATOR_TOKEN)
        status, page, _ = await console.get("/console/limits")
    assert status == 200
    assert "1000 tokens" in page and "5/hour requests" in page
    # Alice spent 300 + 100 tokens (each answer's 3 included), in two of her five requests.
    assert row_of(page, "alice") == ["alice", "400", "600", "$0.0", "no limit", "3"]
    assert row_of(page, "bob") == ["bob", "150", "850", "$0.0", "no limit", "4"]
    assert "<td>carol</td>" not in page and "And 1 more end user, spending less." in page
    assert page.index("<td>alice</td>") < page.index("<td>bob</td>")


async def test_no_end_users_section_without_end_user_limits(door: DoorPod) -> None:
    await spend(door, "alice", 10)
    async with ConsoleClient(door.sidecar.admin_url) as console:
        await console.sign_in(OPERATOR_TOKEN)
        _, page, _ = await console.get("/console/limits")
    assert "End users" not in page and "<td>alice</td>" not in page
