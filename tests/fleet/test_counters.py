"""The one counters interface (state/counters.py) in its two stores: this sidecar's state
directory, and a real redis-server shared by several sidecars (SPEC §24). The same budget
rules hold in both; the shared store holds them across sidecars at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis import Redis

from clawpod.sidecar.governance.budgets import TokenBudgets
from clawpod.sidecar.manifest import BudgetGroup, EndUserLimits, Governance, Rate
from clawpod.sidecar.model.end_user import EndUser
from clawpod.sidecar.state.counters import Claim, Counters, LocalCounters, user_subject
from clawpod.sidecar.state.shared_counters import (
    SharedCounters,
    budget_key,
    connect,
    day_expiry,
)
from tests.fleet.conftest import make_shared, warm
from tests.support.redis_server import RedisServer

GOVERNANCE = Governance(budgets={"*": 1000}, usd_budgets={"a": 1.0})
STORES = ["local", pytest.param("redis", marks=pytest.mark.redis)]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def budgets_at(store: str, request: pytest.FixtureRequest, shared_counters: list[SharedCounters]):  # type: ignore[no-untyped-def]
    """TokenBudgets of agents a and b over ``store``, on ``state`` and ``day`` (a restart is
    a new one on the same state and store)."""
    server = request.getfixturevalue("redis_server") if store == "redis" else None

    def make(state: Path, day: list[str], governance: Governance = GOVERNANCE) -> TokenBudgets:
        counters: Counters | None = None
        if server is not None:
            counters = make_shared(shared_counters, server.url, state, ["a", "b"], today=day[0])
            counters._today = lambda: day[0]  # type: ignore[attr-defined]
        return TokenBudgets(governance, ["a", "b"], state, today=lambda: day[0], counters=counters)

    return make


async def test_usd_spent_survives_a_restart_and_renews_the_next_day(
    tmp_path: Path, budgets_at
) -> None:  # type: ignore[no-untyped-def]
    day = ["2026-11-25"]
    budgets = budgets_at(tmp_path, day)
    hold = await budgets.admit("a", 10, 0.5)
    assert hold is not None
    await budgets.release(hold)
    await budgets.spend("a", 10, 1.25)
    restarted = budgets_at(tmp_path, day)
    assert not await restarted.admit("a", 1, 0.0)  # $1.25 of $1 spent
    assert await restarted.admit("b", 1, 0.0)  # b has a token budget only, untouched
    day[0] = "2026-11-26"
    assert await restarted.admit("a", 1, 0.0)


async def test_a_held_estimate_keeps_parallel_requests_out_until_released(
    tmp_path: Path, budgets_at
) -> None:  # type: ignore[no-untyped-def]
    budgets = budgets_at(tmp_path, ["2026-11-25"])
    first = await budgets.admit("b", 600, 0.0)  # alone: admitted on any remainder
    assert first is not None
    assert not await budgets.admit("b", 600, 0.0)  # beside it, it does not fit
    second = await budgets.admit("b", 300, 0.0)  # a smaller one does
    assert second is not None
    await budgets.release(first)
    await budgets.release(second)
    assert await budgets.admit("b", 600, 0.0)


async def test_an_unreadable_store_counts_from_zero(tmp_path: Path) -> None:
    (tmp_path / "budgets.json").write_text("{not json")
    budgets = TokenBudgets(GOVERNANCE, ["a", "b"], tmp_path, today=lambda: "2026-11-25")
    assert await budgets.admit("a", 1, 0.0)


async def test_one_agents_running_requests_hold_nothing_of_anothers(
    tmp_path: Path, budgets_at
) -> None:  # type: ignore[no-untyped-def]
    budgets = budgets_at(tmp_path, ["2026-11-25"])
    assert await budgets.admit("a", 900, 0.9)
    assert await budgets.admit("b", 900, 0.0)  # b's budget is its own
    await budgets.spend("a", 1000, 0.0)  # a's day is spent; b's is not
    assert not await budgets.admit("a", 1, 0.0)
    assert await budgets.admit("b", 50, 0.0)  # 950 of b's 1000 held
    assert not await budgets.admit("b", 100, 0.0)  # 1,050 would not fit


async def test_a_group_budget_is_spent_by_any_of_its_agents(tmp_path: Path, budgets_at) -> None:  # type: ignore[no-untyped-def]
    team = Governance(budget_groups={"team": BudgetGroup(agents=["a", "b"], tokens_per_day=100)})
    budgets = budgets_at(tmp_path, ["2026-11-25"], team)
    assert budgets.governed == {"a", "b"}
    await budgets.spend("a", 60, 0.0)
    await budgets.spend("b", 40, 0.0)
    assert not await budgets.admit("b", 1, 0.0)
    assert not await budgets.admit("a", 1, 0.0)
    (row,) = await budgets.today()
    assert (row["subject"], row["tokens"]) == ("group:team", 100)


def _at_minute(budgets: TokenBudgets, minute: list[str]) -> TokenBudgets:
    """The budgets' counters (and a shared store's local ones) in the minute ``minute[0]``."""
    counters: object = budgets.counters
    while counters is not None:
        counters._this_minute = lambda: minute[0]  # type: ignore[attr-defined]
        counters = getattr(counters, "local", None)
    return budgets


RATED = Governance(
    budget_groups={
        "team": BudgetGroup(agents=["a", "b"], requests_per_minute=3, tokens_per_minute=100)
    }
)


async def test_a_groups_requests_per_minute_are_counted_as_they_start(
    tmp_path: Path, budgets_at
) -> None:  # type: ignore[no-untyped-def]
    """#51: before, a group had daily budgets only, and the pod file refused a rate."""
    minute = ["2026-11-25T10:00"]
    budgets = _at_minute(budgets_at(tmp_path, ["2026-11-25"], RATED), minute)
    for agent in ("a", "b", "a"):
        hold = await budgets.admit(agent, 1, 0.0)
        assert hold is not None
        await budgets.release(hold)  # a finished request still counts in its minute
    assert not await budgets.admit("b", 1, 0.0)  # the group's fourth this minute
    minute[0] = "2026-11-25T10:01"
    assert await budgets.admit("b", 1, 0.0)


async def test_a_groups_tokens_per_minute_hold_and_spend_like_a_budget(
    tmp_path: Path, budgets_at
) -> None:  # type: ignore[no-untyped-def]
    minute = ["2026-11-25T10:00"]
    budgets = _at_minute(budgets_at(tmp_path, ["2026-11-25"], RATED), minute)
    first = await budgets.admit("a", 80, 0.0)
    assert first is not None
    assert not await budgets.admit("b", 30, 0.0)  # 80 held: 30 more does not fit
    await budgets.release(first)
    await budgets.spend("a", 100, 0.0)
    assert not await budgets.admit("b", 1, 0.0)  # this minute's 100 are spent
    minute[0] = "2026-11-25T10:01"
    assert await budgets.admit("b", 1, 0.0)


@pytest.mark.redis
async def test_a_groups_rate_is_one_across_sidecars(
    tmp_path: Path, redis_server: RedisServer, shared_counters: list[SharedCounters]
) -> None:
    """Three sidecars, one group's 3 requests a minute: three are admitted in all."""
    minute = ["2026-11-25T10:00"]
    sidecars = []
    for i in range(3):
        counters = make_shared(shared_counters, redis_server.url, tmp_path / f"s{i}", ["a"])
        await warm(counters, 10)
        budgets = TokenBudgets(RATED, ["a", "b"], tmp_path / f"s{i}", counters=counters)
        sidecars.append(_at_minute(budgets, minute))
    holds = await asyncio.gather(*(s.admit("a", 1, 0.0) for s in sidecars for _ in range(10)))
    assert len([h for h in holds if h]) == 3


@pytest.mark.redis
async def test_sidecars_sharing_a_store_admit_one_remainder_once(
    tmp_path: Path, redis_server: RedisServer, shared_counters: list[SharedCounters]
) -> None:
    """Three sidecars, one budget: each held estimate is seen by every sidecar at once."""
    day = ["2026-11-25"]
    sidecars = [
        TokenBudgets(
            GOVERNANCE,
            ["a", "b"],
            tmp_path / f"s{i}",
            counters=make_shared(shared_counters, redis_server.url, tmp_path / f"s{i}", ["a"]),
        )
        for i in range(3)
    ]
    for budgets in sidecars:
        assert isinstance(budgets.counters, SharedCounters)
        await warm(budgets.counters, 10)
    holds = await asyncio.gather(*(s.admit("b", 600, 0.0) for s in sidecars for _ in range(10)))
    admitted = [h for h in holds if h]
    assert len(admitted) == 1  # 600 alone; a second 600 never fits beside it
    assert day


@pytest.mark.redis
async def test_a_rate_is_one_bucket_across_sidecars(
    tmp_path: Path, redis_server: RedisServer, shared_counters: list[SharedCounters]
) -> None:
    rate = Rate(count=5, per="minute")
    sidecars = [
        make_shared(shared_counters, redis_server.url, tmp_path / f"s{i}", []) for i in range(3)
    ]
    for counters in sidecars:
        await warm(counters, 10)
    taken = await asyncio.gather(
        *(s.take(("a", "desk.trade", 0), rate) for s in sidecars for _ in range(10))
    )
    assert taken.count(True) == 5
    assert not await sidecars[0].take(("a", "desk.trade", 0), rate)
    assert sum(sidecars[0].levels().values()) < 1  # the console sees the shared level


@pytest.mark.redis
async def test_what_was_spent_while_the_store_was_away_is_written_once(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Many checks at once when the store comes back: each kept spend is written by one."""
    now = [0.0]
    counters = SharedCounters(
        connect(redis_server.url),
        pod="desk",
        on_unreachable="fail-local",
        local=LocalCounters(tmp_path, ["a"], ["a"]),
        today=lambda: "2026-12-07",
        clock=lambda: now[0],
    )
    redis_server.kill()
    for _ in range(3):
        await counters.spend([Claim("a", 10**6, None)], 100, 0.0)  # kept: the store is away
    redis_server.start()
    now[0] = 100.0  # the pause is over
    claims = [Claim("a", 10**6, None)]
    await asyncio.gather(*(counters.reserve(claims, 1, 0.0) for _ in range(10)))
    assert counters.up
    spent = await counters.spent(["a"])
    assert spent["a"][0] == 300
    await counters.close()


@pytest.mark.redis
async def test_a_spend_written_again_counts_once(
    tmp_path: Path, redis_server: RedisServer, shared_counters: list[SharedCounters]
) -> None:
    """A spend whose answer was lost (a timeout after the server ran it) is kept and written
    again when the server answers: its marker makes the second write count nothing."""
    counters = make_shared(shared_counters, redis_server.url, tmp_path, ["a"])
    keys = [budget_key("desk", "a", "2026-12-07"), "{clawpod}:spent:one-spend"]
    args = [100, 0, 60, day_expiry("2026-12-07")]
    for _ in range(3):
        await counters._scripts["spend"](keys=keys, args=args)
    assert (await counters.spent(["a"]))["a"] == (100, 0.0)


def _end_user(subject: str) -> EndUser:
    return EndUser(subject=subject, issuer="https://idp.test", expires_at=0.0, token="t" * 40)


async def test_an_end_users_budget_is_spent_by_any_agent_and_survives_a_restart(
    tmp_path: Path, budgets_at
) -> None:  # type: ignore[no-untyped-def]
    """SPEC §21: per-end-user budgets beside the agents' own, in either store."""
    day = ["2026-11-25"]
    users = Governance(end_user_limits=EndUserLimits(tokens_per_day=100, usd_per_day=1.0))
    budgets = budgets_at(tmp_path, day, users)
    alice, bob = _end_user("alice"), _end_user("bob")
    assert budgets.governed == set()  # no agent budget: only requests for an end user count
    assert budgets.applies("a", alice) and not budgets.applies("a", None)
    await budgets.spend("a", 60, 0.0, end_user=alice)
    await budgets.spend("b", 40, 0.0, end_user=alice)
    assert not await budgets.admit("b", 1, 0.0, end_user=alice)
    assert await budgets.admit("a", 1, 0.0, end_user=bob)  # another end user's day is their own
    restarted = budgets_at(tmp_path, day, users)
    assert not await restarted.admit("a", 1, 0.0, end_user=alice)
    await restarted.spend("a", 1, 1.5, end_user=bob)
    assert not await restarted.admit("a", 1, 0.0, end_user=bob)  # $1.50 of $1
    day[0] = "2026-11-26"
    assert await restarted.admit("a", 1, 0.0, end_user=alice)


@pytest.mark.redis
async def test_an_end_users_budget_is_shared_across_pods(
    tmp_path: Path, redis_server: RedisServer, shared_counters: list[SharedCounters]
) -> None:
    users = Governance(end_user_limits=EndUserLimits(tokens_per_day=100))
    pods = []
    for pod in ("north", "south"):
        counters = SharedCounters(
            connect(redis_server.url),
            pod=pod,
            on_unreachable="fail-closed",
            local=LocalCounters(tmp_path / pod),
        )
        shared_counters.append(counters)
        pods.append(TokenBudgets(users, ["a"], tmp_path / pod, counters=counters))
    north, south = pods
    await north.spend("a", 100, 0.0, end_user=_end_user("carol"))
    assert not await south.admit("a", 1, 0.0, end_user=_end_user("carol"))
    assert await south.admit("a", 1, 0.0, end_user=_end_user("dave"))
    # And so is an end user's request rate (end-user-limits.requests).
    once = Rate(count=1, per="hour")
    assert await north.counters.take((user_subject("carol"), "requests", 0), once)
    assert not await south.counters.take((user_subject("carol"), "requests", 0), once)
    assert await south.counters.take((user_subject("dave"), "requests", 0), once)


async def test_a_settled_request_gives_its_hold_back_and_counts_what_it_spent(
    tmp_path: Path, budgets_at
) -> None:  # type: ignore[no-untyped-def]
    budgets = budgets_at(tmp_path, ["2026-11-25"])
    hold = await budgets.admit("b", 600, 0.0)
    assert hold
    await budgets.spend("b", 100, 0.0, hold)
    again = await budgets.admit("b", 600, 0.0)  # nothing held beside it any more
    assert again
    (row,) = [r for r in await budgets.today() if r["subject"] == "b"]
    assert row["tokens"] == 100


@pytest.mark.redis
async def test_a_request_costs_the_shared_store_two_round_trips(
    tmp_path: Path, redis_server: RedisServer, shared_counters: list[SharedCounters]
) -> None:
    """#51: the reservation of every limit of a request is one script, and its release and
    spend one more (before: a release and a spend, three calls a request)."""
    rated = Governance(
        budgets={"*": 1000},
        budget_groups={
            "team": BudgetGroup(agents=["a"], tokens_per_day=10**6, tokens_per_minute=10**5)
        },
    )
    counters = make_shared(shared_counters, redis_server.url, tmp_path, ["a"])
    budgets = TokenBudgets(rated, ["a", "b"], tmp_path, counters=counters)
    await counters.start()
    before = _script_calls(redis_server)
    hold = await budgets.admit("a", 10, 0.0)
    assert hold
    await budgets.spend("a", 5, 0.0, hold)
    assert _script_calls(redis_server) - before == 2
    spent = await counters.spent(["a", "group:team"])
    assert spent == {"a": (5, 0.0), "group:team": (5, 0.0)}


def _script_calls(server: RedisServer) -> int:
    client = Redis.from_url(server.url)
    try:
        stats = client.info("commandstats")
        return sum(v["calls"] for k, v in stats.items() if k.startswith("cmdstat_eval"))
    finally:
        client.close()


def test_a_new_minute_keeps_every_days_holds(tmp_path: Path) -> None:
    """A subject whose name has an '@' (an end user's e-mail) keeps its day's hold when the
    minute turns: before, the roll took every held key with an '@' for a minute's."""
    minute = ["2026-11-25T10:00"]
    counters = LocalCounters(tmp_path, ["user:ann@example.com"], [], this_minute=lambda: minute[0])
    claims = [Claim("user:ann@example.com", 1000, None)]
    assert counters.reserve_now(claims, 600, 0.0)
    minute[0] = "2026-11-25T10:01"
    assert not counters.reserve_now(claims, 600, 0.0)  # 600 still held: 1,200 would not fit


@pytest.mark.redis
async def test_a_server_that_forgot_the_scripts_is_sent_them_again(
    tmp_path: Path, redis_server: RedisServer, shared_counters: list[SharedCounters]
) -> None:
    """A restarted or flushed server has no script: the check loads it and still counts, with
    no refusal and no pause (the sidecar runs its scripts by SHA1)."""
    counters = make_shared(shared_counters, redis_server.url, tmp_path, ["a"])
    await counters.start()
    client = redis_server.client()
    try:
        client.script_flush()
        hold = await counters.reserve([Claim("a", 1000, None)], 10, 0.0)
        await counters.settle(hold, [Claim("a", 1000, None)], 7, 0.0)  # type: ignore[arg-type]
        client.script_flush()
        taken = await counters.take(("a", "t", 0), Rate(count=1, per="minute"))
        loaded = client.script_exists(*(s.sha for s in counters._scripts.values()))
    finally:
        client.close()
    assert hold.shared and counters.up and taken  # type: ignore[union-attr]
    assert (await counters.spent(["a"]))["a"] == (7, 0.0)
    assert loaded == [False, False, False, False, True]  # the rate's, loaded again
