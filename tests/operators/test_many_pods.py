"""``clawc approvals`` and ``clawc audit show`` over several sidecars (SPEC §15): two real pods,
one list with each row naming its pod."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clawpod.cli.audit import remote_show_command
from clawpod.cli.clawc import main as clawc
from clawpod.sidecar.state.approvals import ARGUMENTS_PREVIEW_BYTES
from tests.execution.test_governance import OPERATOR_TOKEN, TRADE, Desk, ask_analyst, trade
from tests.operators.desk import start_desk
from tests.support.services import ToolService
from tests.support.upstream import StubUpstream


@pytest.fixture
async def pods(tmp_path: Path, service: ToolService) -> AsyncIterator[tuple[Desk, Desk]]:
    async with StubUpstream() as north_upstream, StubUpstream() as south_upstream:
        north = await start_desk(tmp_path / "n", service, north_upstream, pod_name="north")
        south = await start_desk(tmp_path / "s", service, south_upstream, pod_name="south")
        try:
            yield north, south
        finally:
            await north.sidecar.close()
            await south.sidecar.close()


@pytest.fixture(autouse=True)
def operator_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAW_OPERATOR_TOKEN", OPERATOR_TOKEN)


async def _clawc(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(clawc, list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def _sidecars(*desks: Desk) -> list[str]:
    return [arg for desk in desks for arg in ("--sidecar", desk.sidecar.admin_url)]


async def test_one_list_of_approvals_over_two_pods_and_decisions_where_they_live(
    pods: tuple[Desk, Desk],
) -> None:
    north, south = pods
    north_trade = asyncio.create_task(trade(north, TRADE))
    south_trade = asyncio.create_task(trade(south, {**TRADE, "symbol": "AMD"}))
    [north_approval] = await north.pending()
    [south_approval] = await south.pending()
    code, listed, err = await _clawc("approvals", "list", *_sidecars(north, south))
    assert code == 0, err
    rows = listed.splitlines()
    assert len(rows) == 2
    assert {row.split()[0] for row in rows} == {"north", "south"}
    assert any(r.startswith(f"north  {north_approval['id']}  pending  trader") for r in rows)
    assert any(r.startswith(f"south  {south_approval['id']}") and "AMD" in r for r in rows)

    code, decided, err = await _clawc(
        "approvals", "approve", south_approval["id"], *_sidecars(north, south), "--reason", "ok"
    )
    assert (code, decided) == (0, f"south: {south_approval['id']}: approved\n"), err
    assert (await south_trade)["ok"] is True
    code, decided, err = await _clawc(
        "approvals", "deny", north_approval["id"], *_sidecars(north, south)
    )
    assert (code, decided) == (0, f"north: {north_approval['id']}: denied\n"), err
    assert (await north_trade)["error"]["code"] == "approval_denied"
    code, _, err = await _clawc("approvals", "deny", "apr_nowhere", *_sidecars(north, south))
    assert code == 1 and "no sidecar holds approval apr_nowhere" in err
    code, listed, _ = await _clawc("approvals", "list", *_sidecars(north, south))
    assert (code, listed) == (0, "no pending approvals\n")


async def test_a_sidecar_that_cannot_be_reached_is_named_and_the_others_still_listed(
    pods: tuple[Desk, Desk],
) -> None:
    north, _ = pods
    waiting = asyncio.create_task(trade(north, TRADE))
    [approval] = await north.pending()
    code, listed, err = await _clawc(
        "approvals", "list", *_sidecars(north), "--sidecar", "http://127.0.0.1:9"
    )
    assert code == 1 and approval["id"] in listed and "cannot reach http://127.0.0.1:9" in err
    await north.operator("POST", f"/operator/approvals/{approval['id']}", decision="deny")
    await waiting


async def test_audit_show_over_two_pods(pods: tuple[Desk, Desk]) -> None:
    north, south = pods
    await ask_analyst(north, ("c1", "desk_get_quote", {"symbol": "AAPL"}))
    await ask_analyst(south, ("c2", "desk_get_quote", {"symbol": "MSFT"}))
    code, shown, err = await _clawc("audit", "show", *_sidecars(north, south), "--agent", "analyst")
    assert code == 0, err
    assert "== north/analyst" in shown and "== south/analyst" in shown
    north_part, south_part = shown.split("== south/analyst")
    assert "desk.get_quote" in north_part and "AAPL" in north_part and "MSFT" in south_part
    # The agent token opens nothing here either.
    out, err_out = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(
        remote_show_command,
        _sidecars(north)[1:],
        out,
        err_out,
        env={"CLAW_OPERATOR_TOKEN": north.tokens["analyst"]},
    )
    assert code == 1 and "agent tokens cannot use the operator API" in err_out.getvalue()


async def test_arguments_too_large_to_list_show_their_start_size_and_digest(
    pods: tuple[Desk, Desk],
) -> None:
    north, _ = pods
    huge = {**TRADE, "symbol": "X" * (ARGUMENTS_PREVIEW_BYTES + 10)}
    waiting = asyncio.create_task(trade(north, huge))
    [approval] = await north.pending()
    code, listed, err = await _clawc("approvals", "list", *_sidecars(north))
    assert code == 0, err
    assert f"bytes, digest {approval['args_digest']})" in listed and len(listed) < 1000
    await north.operator("POST", f"/operator/approvals/{approval['id']}", decision="deny")
    await waiting
