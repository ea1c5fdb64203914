"""A fleet on one shared store (SPEC §24): three real sidecars, each its own pod, one group
budget across them on a real redis-server, driven by 50 agents at once through the OpenAI SDK;
the server killed mid-run and restarted."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from clawpod.sidecar.manifest import BudgetGroup, Governance, Provider, SharedLimits
from clawpod.sidecar.server.operator import console_data
from clawpod.sidecar.server.request.context import STATE_KEY
from clawpod.sidecar.state.counters import SharedLimitsUnavailable
from clawpod.sidecar.state.shared_counters import budget_key
from tests.support.builds import AgentSpec, write_build
from tests.support.redis_server import RedisServer
from tests.support.sidecar import RunningSidecar, audit_records, start_sidecar
from tests.support.upstream import Reply, StubUpstream, openai_completion

pytestmark = pytest.mark.redis

AGENTS = 50
SIDECARS = 3
ASK = [{"role": "user", "content": "hi"}]
MAX_TOKENS = 10
USAGE = {"prompt_tokens": 10, "completion_tokens": 10}  # 20 tokens, under each estimate
ESTIMATE_BOUND = 60
"""More than the sidecar's estimate of one of these requests (its bytes / 4 + max_tokens)."""


@dataclass
class Fleet:
    sidecars: list[RunningSidecar]
    state_dirs: list[Path]
    tokens: dict[str, tuple[int, str]]  # agent -> (sidecar, token)
    upstream: StubUpstream
    clients: dict[str, openai.AsyncOpenAI] = field(default_factory=dict)

    def client(self, agent: str) -> openai.AsyncOpenAI:
        if agent not in self.clients:
            index, token = self.tokens[agent]
            self.clients[agent] = openai.AsyncOpenAI(
                base_url=self.sidecars[index].openai_base_url, api_key=token, max_retries=0
            )
        return self.clients[agent]

    async def admitted(self, agent: str) -> tuple[int, str | None, dict[str, str]]:
        """One request, sent again while the sidecar answers 503 with x-should-retry (as the
        SDKs do by default): on a loaded machine a check may time out, and fail-closed."""
        for _ in range(50):
            status, code, headers = await self.ask(agent)
            if status != 503 or headers.get("x-should-retry") != "true":
                return status, code, headers
            await asyncio.sleep(0.1)
        return status, code, headers

    async def ask(self, agent: str) -> tuple[int, str | None, dict[str, str]]:
        """One request: its status, error code and headers."""
        try:
            raw = await self.client(agent).chat.completions.with_raw_response.create(
                model="gpt-4o", messages=ASK, max_tokens=MAX_TOKENS
            )
        except openai.APIStatusError as err:
            body = err.body if isinstance(err.body, dict) else {}
            code = body.get("code") or (body.get("error") or {}).get("code")
            return err.status_code, code, dict(err.response.headers)
        return raw.http_response.status_code, None, dict(raw.http_response.headers)

    def audit(self) -> list[dict[str, Any]]:
        return [
            record
            for agent, (index, _) in self.tokens.items()
            for record in audit_records(self.state_dirs[index], agent)
        ]

    def audited_tokens(self) -> int:
        return sum(
            r["usage"]["input_tokens"] + r["usage"]["output_tokens"]
            for r in self.audit()
            if r.get("http_status") == 200
        )


async def metrics(sidecar: RunningSidecar) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(sidecar.admin_url + "/metrics") as response,
    ):
        return await response.text()


def group_tokens(server: RedisServer, day: str) -> int:
    client = server.client()
    try:
        value = client.hget(budget_key("any", "group:team", day), "t")
    finally:
        client.close()
    return int(value or 0)


@pytest.fixture
async def fleet_of(tmp_path: Path, redis_server: RedisServer) -> AsyncIterator[Any]:
    made: list[Fleet] = []

    async def make(limit: int, on_unreachable: str = "fail-closed") -> Fleet:
        upstream = await StubUpstream().start()
        upstream.always("openai", Reply.json(openai_completion(**USAGE)))
        provider = Provider(
            api="openai", base_url=upstream.url + "/v1", key_env="OPENAI_KEY", models=["gpt-*"]
        )
        sidecars, state_dirs, tokens = [], [], {}
        for index in range(SIDECARS):
            agents = [f"agent-{n}" for n in range(AGENTS) if n % SIDECARS == index]
            group = BudgetGroup(agents=agents, tokens_per_day=limit)
            written = write_build(
                tmp_path / f"build{index}",
                [AgentSpec(agent, mode="native") for agent in agents],
                {"openai": provider},
                pod=f"pod-{index}",
                governance=Governance(budget_groups={"team": group}),
                shared_limits=SharedLimits(url_env="REDIS_URL", on_unreachable=on_unreachable),
            )
            env = {"OPENAI_KEY": "sk-fleet-test-key", "REDIS_URL": redis_server.url}
            state_dirs.append(tmp_path / f"state{index}")
            sidecars.append(await start_sidecar(tmp_path / f"build{index}", state_dirs[-1], env))
            tokens |= {agent: (index, token) for agent, token in written.items()}
        fleet = Fleet(sidecars, state_dirs, tokens, upstream)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        for client in fleet.clients.values():
            await client.close()
        for sidecar in fleet.sidecars:
            await sidecar.close()
        await fleet.upstream.close()


async def test_fifty_agents_on_three_sidecars_spend_one_group_budget_once(
    fleet_of: Any, redis_server: RedisServer
) -> None:
    limit = 1000
    fleet: Fleet = await fleet_of(limit)

    async def agent_until_refused(agent: str) -> list[tuple[int, str | None]]:
        answers = []
        while True:
            status, code, _ = await fleet.admitted(agent)
            answers.append((status, code))
            if status != 200:
                return answers

    runs = await asyncio.gather(*(agent_until_refused(a) for a in fleet.tokens))
    answers = Counter(answer for run in runs for answer in run)
    assert set(answers) == {(200, None), (429, "budget_exhausted")}
    spent = answers[(200, None)] * sum(USAGE.values())
    assert limit <= spent <= limit + SIDECARS * ESTIMATE_BOUND
    await asyncio.sleep(0.2)  # the last records are written after their answers
    day = fleet.audit()[0]["time"][:10]
    assert group_tokens(redis_server, day) == spent == fleet.audited_tokens()
    for sidecar in fleet.sidecars:  # every pod's console shows the one group
        (row,) = await console_data.budgets(sidecar.app[STATE_KEY])
        assert (row["agent"], row["spent"], row["limit"]) == ("group:team", spent, limit)


async def _held_round(fleet: Fleet, kill: Any) -> list[tuple[int, str | None, dict[str, str]]]:
    """Every agent's request admitted and held at the provider, ``kill`` run, then answered."""
    gate = asyncio.Event()
    body = openai_completion(**USAGE)
    fleet.upstream.always("openai", Reply(chunks=[gate, Reply.json(body).body]))
    before = len(fleet.upstream.requests_to("openai"))
    round_ = asyncio.gather(*(fleet.admitted(a) for a in fleet.tokens))
    while len(fleet.upstream.requests_to("openai")) < before + AGENTS:
        await asyncio.sleep(0.01)
    kill()
    gate.set()
    answers = await round_
    fleet.upstream.always("openai", Reply.json(body))
    return answers


async def _until_shared(fleet: Fleet, index: int) -> None:
    """Requests of one of the sidecar's agents until it counts in the store again (it tries
    the store again after a pause)."""
    agent = next(a for a, (i, _) in fleet.tokens.items() if i == index)
    for _ in range(200):
        status, _, headers = await fleet.ask(agent)
        assert status == 200 or (status == 503 and headers["x-should-retry"] == "true")
        if 'claw_shared_limits_up{store="redis"} 1.0' in await metrics(fleet.sidecars[index]):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the sidecar never counted in the store again")


@pytest.mark.parametrize("on_unreachable", ["fail-closed", "fail-local"])
async def test_the_store_killed_mid_run_then_restarted(
    fleet_of: Any, redis_server: RedisServer, on_unreachable: str
) -> None:
    fleet: Fleet = await fleet_of(1_000_000, on_unreachable)
    first = await asyncio.gather(*(fleet.admitted(a) for a in fleet.tokens))
    assert {status for status, _, _ in first} == {200}
    during = await _held_round(fleet, redis_server.kill)  # settled while the store is away
    assert {status for status, _, _ in during} == {200}
    away = await asyncio.gather(*(fleet.ask(a) for a in fleet.tokens))
    if on_unreachable == "fail-closed":
        assert {(s, c) for s, c, _ in away} == {(503, "shared_limits_unavailable")}
        assert {h["x-should-retry"] for _, _, h in away} == {"true"}
        with pytest.raises(SharedLimitsUnavailable):  # the console says so, shows no stale count
            await console_data.budgets(fleet.sidecars[0].app[STATE_KEY])
    else:
        assert {status for status, _, _ in away} == {200}
        local = [r for r in fleet.audit() if r.get("limits") == "local"]
        assert len(local) >= AGENTS  # each request decided alone says so in its record
    for sidecar in fleet.sidecars:  # the alarm
        assert 'claw_shared_limits_up{store="redis"} 0.0' in await metrics(sidecar)
    redis_server.start()
    for index in range(SIDECARS):
        await _until_shared(fleet, index)
    after = await asyncio.gather(*(fleet.admitted(a) for a in fleet.tokens))
    assert {status for status, _, _ in after} == {200}
    await asyncio.sleep(0.2)
    records = fleet.audit()
    assert len(records) >= 4 * AGENTS  # every answer audited, refusals too
    assert sum(r["http_status"] == 200 for r in records) == len(
        fleet.upstream.requests_to("openai")
    )
    day = records[0]["time"][:10]
    # Nothing spent is lost: what was settled while the store was away is written on return.
    assert group_tokens(redis_server, day) == fleet.audited_tokens()
