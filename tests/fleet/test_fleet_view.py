"""``clawc budgets``: the fleet's budgets read from the shared store (SPEC §24), as two pods'
sidecars counted them on a real redis-server."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from clawpod.cli.clawc import main
from clawpod.sidecar.governance.budgets import TokenBudgets
from clawpod.sidecar.manifest import BudgetGroup, EndUserLimits, Governance
from clawpod.sidecar.model.end_user import EndUser
from clawpod.sidecar.state.counters import LocalCounters
from clawpod.sidecar.state.shared_counters import SharedCounters, connect
from tests.support.redis_server import RedisServer

DAY = "2026-12-07"


async def _pod(tmp_path: Path, url: str, pod: str, agent: str) -> TokenBudgets:
    governance = Governance(
        budgets={agent: 500},
        budget_groups={"team": BudgetGroup(agents=[agent], tokens_per_day=800, usd_per_day=2.5)},
    )
    counters = SharedCounters(
        connect(url),
        pod=pod,
        on_unreachable="fail-closed",
        local=LocalCounters(tmp_path / pod),
        today=lambda: DAY,
    )
    return TokenBudgets(governance, [agent], tmp_path / pod, counters=counters)


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(["budgets", *argv], stdout=out, stderr=err), out.getvalue(), err.getvalue()


@pytest.mark.redis
async def test_one_view_of_every_pods_budgets(
    tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = await _pod(tmp_path, redis_server.url, "pod-a", "analyst")
    b = await _pod(tmp_path, redis_server.url, "pod-b", "writer")
    hold = await a.admit("analyst", 40, 0.01)
    await b.spend("writer", 100, 0.5)
    await a.spend("analyst", 30, 0.25)
    monkeypatch.setenv("FLEET_REDIS_URL", redis_server.url)
    code, out, err = await _in_thread(_run, "--url-env", "FLEET_REDIS_URL", "--day", DAY)
    assert code == 0, err
    assert out.splitlines() == [
        f"budgets of {DAY} (UTC) in the shared store: 3",
        "group/team  tokens 130 of 800 (+40 held)  usd $0.75 of $2.5 (+$0.01 held)",
        "pod/pod-a/agent/analyst  tokens 30 of 500 (+40 held)  usd $0.25 (+$0.01 held)",
        "pod/pod-b/agent/writer  tokens 100  usd $0.5",
    ]
    assert redis_server.password not in out + err
    code, out, _ = await _in_thread(_run, "--url-env", "FLEET_REDIS_URL", "--day", DAY, "--json")
    document = json.loads(out)
    team = next(b for b in document["budgets"] if b["budget"] == "group/team")
    assert (team["tokens"], team["tokens_held"], team["usd_limit"]) == (130, 40, 2.5)
    assert hold is not None
    await a.release(hold)
    for budgets in (a, b):
        assert isinstance(budgets.counters, SharedCounters)
        await budgets.counters.close()


async def _in_thread(function, *args):  # type: ignore[no-untyped-def]
    """clawc runs its own event loop."""
    return await asyncio.to_thread(function, *args)


def test_a_store_away_is_an_error_without_its_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_REDIS_URL", "redis://:s3cret-pass@127.0.0.1:1/0")
    code, out, err = _run("--url-env", "FLEET_REDIS_URL")
    assert code == 1 and "did not answer" in err
    assert "s3cret-pass" not in out + err


def test_a_day_is_a_day() -> None:
    with pytest.raises(SystemExit):
        _run("--url-env", "X", "--day", "*")


@pytest.mark.redis
async def test_the_end_users_spending_most_are_listed_and_the_rest_counted(
    tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("clawpod.cli.budgets.TOP_END_USERS", 2, raising=False)
    governance = Governance(end_user_limits=EndUserLimits(tokens_per_day=1000))
    counters = SharedCounters(
        connect(redis_server.url),
        pod="pod-a",
        on_unreachable="fail-closed",
        local=LocalCounters(tmp_path / "pod-a"),
        today=lambda: DAY,
    )
    budgets = TokenBudgets(governance, ["analyst"], tmp_path / "pod-a", counters=counters)
    for user, tokens in [("carol", 50), ("alice", 300), ("bob", 150), ("dave", 10)]:
        await budgets.spend("analyst", tokens, end_user=EndUser(user, "https://idp", 0.0, "t"))
    monkeypatch.setenv("FLEET_REDIS_URL", redis_server.url)
    code, out, err = await _in_thread(_run, "--url-env", "FLEET_REDIS_URL", "--day", DAY)
    assert code == 0, err
    assert out.splitlines() == [
        f"budgets of {DAY} (UTC) in the shared store: 4",
        "user/alice  tokens 300  usd $0",
        "user/bob  tokens 150  usd $0",
        "and 2 more end users (user/...), spending less",
    ]
    code, out, _ = await _in_thread(_run, "--url-env", "FLEET_REDIS_URL", "--day", DAY, "--json")
    document = json.loads(out)
    assert [b["budget"] for b in document["budgets"]] == ["user/alice", "user/bob"]
    assert document["more_end_users"] == 2
    await counters.close()
