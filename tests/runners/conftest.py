"""The runner matrix: real runners (installed by scripts/install-runners.sh at pinned versions)
against a running sidecar and a scripted provider; a runner that cannot run here is skipped
with the reason."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clawpod.sidecar.manifest import Provider
from tests.mediation.conftest import TRADING_TOKEN, desk_tools
from tests.runners.provider import QUOTE, ScriptedProvider
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.services import RecordedRequest, ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, RunningSidecar, start_sidecar

RUNNERS_DIR = Path(
    os.environ.get(
        "CLAW_RUNNERS_DIR",
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "clawpod-runners",
    )
)
BIN = RUNNERS_DIR / "node_modules" / ".bin"
# A runner that hangs must not hang the suite; not a timing assertion.
RUNNER_TIMEOUT_S = 120


def runner_binary(name: str, venv: str | None = None, group: str | None = None) -> Path:
    """An installed runner: an npm binary (of the npm prefix ``js-<group>``), or a program in
    the runner's own venv."""
    if venv:
        path = RUNNERS_DIR / f"py-{venv}" / "bin" / name
    elif group:
        path = RUNNERS_DIR / f"js-{group}" / "node_modules" / ".bin" / name
    else:
        path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed in {RUNNERS_DIR}: run scripts/install-runners.sh")
    return path


@dataclass
class RunnerPod:
    sidecar: RunningSidecar
    provider: ScriptedProvider
    service: ToolService
    tokens: dict[str, str]
    home: Path

    def quote_calls(self) -> list[RecordedRequest]:
        return [r for r in self.service.requests if r.path.startswith("/quotes/")]

    def orders(self) -> list[RecordedRequest]:
        return [r for r in self.service.requests if r.path == "/trades"]

    def env(self, agent: str, **extra: str) -> dict[str, str]:
        """The agent's env file (SPEC §3) in a clean home, nothing else of this machine's."""
        token = self.tokens[agent]
        return {
            "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.home),
            "CLAW_AGENT_TOKEN": token,
            "OPENAI_BASE_URL": self.sidecar.url + "/v1",
            "OPENAI_API_KEY": token,
            "ANTHROPIC_BASE_URL": self.sidecar.url,
            "ANTHROPIC_API_KEY": token,
            **extra,
        }

    async def run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path | None = None,
        timeout_s: float = RUNNER_TIMEOUT_S,
    ) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=cwd or self.home,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), timeout_s)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise
        return process.returncode or 0, out.decode(), err.decode()


@pytest.fixture
async def runner_pod(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[RunnerPod]:
    """Agents ``mediated`` and ``native`` with the desk tools; ``@pytest.mark.plan(...)`` sets
    the provider's plan of tool calls, ``@pytest.mark.failures(n)`` its failures after them,
    ``@pytest.mark.narrate`` text in its call turns."""
    marker = request.node.get_closest_marker("plan")
    failures = request.node.get_closest_marker("failures")
    provider = await ScriptedProvider(
        plan=marker.args if marker else (QUOTE,),
        failures=failures.args[0] if failures else 0,
        narrate=request.node.get_closest_marker("narrate") is not None,
    ).start()

    def agents(service_url: str) -> list[AgentSpec]:
        return [
            AgentSpec("mediated", desk_tools(service_url)),
            AgentSpec("native", desk_tools(service_url), mode="native"),
        ]

    providers = providers_for(provider.url + "/v1", provider.url)
    async with serving(tmp_path, provider, agents, providers) as pod:
        yield pod


@asynccontextmanager
async def serving(
    tmp_path: Path,
    provider: ScriptedProvider,
    agents: Callable[[str], list[AgentSpec]],
    providers: dict[str, Provider],
    **config: Any,
) -> AsyncIterator[RunnerPod]:
    """A sidecar serving ``agents`` (given the trading service's URL) against ``provider``,
    the service requiring its token (``config``: the build's other settings, as
    ``write_build`` takes them); everything is stopped afterwards."""
    service = await ToolService().start()
    service.require_header("Authorization", f"Bearer {TRADING_TOKEN}")
    tokens = write_build(tmp_path / "build", agents(service.url), providers, **config)
    env = {**TEST_PROVIDER_KEYS, "TRADING_TOKEN": TRADING_TOKEN}
    sidecar = await start_sidecar(tmp_path / "build", tmp_path / "state", env=env)
    home = tmp_path / "home"
    home.mkdir()
    try:
        yield RunnerPod(sidecar, provider, service, tokens, home)
    finally:
        await sidecar.close()
        await service.close()
        await provider.close()
        shutil.rmtree(home, ignore_errors=True)
