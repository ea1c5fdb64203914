"""kill -9 of a real sidecar process mid-request (SPEC §8.2): after a restart, an identical
retry resumes from the journal and the destructive call is not sent again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from clawpod.sidecar.manifest import ToolPolicy
from tests.mediation.conftest import TRADING_TOKEN, desk_tools
from tests.mediation.scripted import oa_calls, oa_text
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, audit_records
from tests.support.upstream import Reply, StubUpstream

LISTENING = re.compile(rb"listening on http://127\.0\.0\.1:(\d+)")
GUARD_S = 30  # a deadlock guard for the child process, not a timing assertion
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Buy one AAPL."}]}
BUY = {"symbol": "AAPL", "side": "buy", "quantity": 1}


class Process:
    def __init__(self, build: Path, state: Path) -> None:
        self.build, self.state = build, state
        self.process: asyncio.subprocess.Process | None = None
        self.url = ""

    async def start(self) -> None:
        env = {**os.environ, **TEST_PROVIDER_KEYS, "TRADING_TOKEN": TRADING_TOKEN}
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "clawpod.sidecar", "--build", str(self.build),
            "--host", "127.0.0.1", "--port", "0", "--state-dir", str(self.state),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env,
        )  # fmt: skip
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), GUARD_S)
        match = LISTENING.search(line)
        assert match, line
        self.url = f"http://127.0.0.1:{int(match.group(1))}"

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await asyncio.wait_for(self.process.wait(), GUARD_S)

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(self.process.wait(), GUARD_S)


@pytest.fixture
async def sidecar(
    tmp_path: Path, upstream: StubUpstream, service: ToolService
) -> AsyncIterator[tuple[Process, str]]:
    policy = ToolPolicy(timeout_per_tool_ms=20000, total_timeout_ms=60000)
    tokens = write_build(
        tmp_path / "build",
        [AgentSpec("analyst", desk_tools(service.url), policy=policy)],
        providers_for(upstream.openai_url, upstream.anthropic_url),
    )
    process = Process(tmp_path / "build", tmp_path / "state")
    await process.start()
    yield process, tokens["analyst"]
    await process.stop()


async def post(url: str, token: str) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + "/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {token}"}
        ) as response,
    ):
        return response.status, await response.json()


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(GUARD_S * 100):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def crash_during(process: Process, token: str, moment: Callable[[], bool]) -> None:
    """Send the request, kill -9 the sidecar at ``moment``, start it again."""
    request: Awaitable[Any] = asyncio.ensure_future(post(process.url, token))
    await until(moment)
    await process.kill()
    with contextlib.suppress(aiohttp.ClientError):
        await request
    await process.start()


def trades(service: ToolService) -> int:
    return sum(1 for r in service.requests if r.path == "/trades")


async def test_killed_between_the_tool_and_the_next_model_call(
    sidecar: tuple[Process, str], upstream: StubUpstream, service: ToolService
) -> None:
    process, token = sidecar
    upstream.enqueue("openai", Reply.json(oa_calls(("t1", "desk_trade", BUY))), Reply.hang())
    # The second model call has begun: the trade ran and its result was journaled before it.
    await crash_during(process, token, lambda: len(upstream.requests_to("openai")) == 2)
    assert trades(service) == 1
    upstream.enqueue("openai", Reply.json(oa_text("Bought.")))
    status, answer = await post(process.url, token)
    assert status == 200, answer
    assert answer["choices"][0]["message"]["content"] == "Bought."
    assert trades(service) == 1
    resumed = upstream.requests_to("openai")[-1].json
    assert orjson.loads(resumed["messages"][-1]["content"])["ok"] is True
    # The killed attempt left no audit record; the one that resumed it names it.
    await until(lambda: bool(audit_records(process.state, "analyst")))
    assert audit_records(process.state, "analyst")[-1]["resumed_from"].startswith("req_")


async def test_killed_while_the_service_runs_the_call(
    sidecar: tuple[Process, str], upstream: StubUpstream, service: ToolService
) -> None:
    """Sent but never answered: whether it took effect is unknown, so it is not sent again and
    the model is told so."""
    process, token = sidecar
    service.reply("/trades", delay_s=3)  # still running when the sidecar dies
    upstream.enqueue("openai", Reply.json(oa_calls(("t1", "desk_trade", BUY))))
    await crash_during(process, token, lambda: trades(service) == 1)
    upstream.enqueue("openai", Reply.json(oa_text("The order may have gone through.")))
    status, _ = await post(process.url, token)
    assert status == 200
    assert trades(service) == 1
    resumed = upstream.requests_to("openai")[-1].json
    assert orjson.loads(resumed["messages"][-1]["content"])["error"]["code"] == "outcome_unknown"
