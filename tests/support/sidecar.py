"""Run a real sidecar in-process on 127.0.0.1 (random port) for SDK-driven tests."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from clawpod.sidecar.audit.log import AUDIT_KEY_ENV
from clawpod.sidecar.manifest import load_build
from clawpod.sidecar.server.admin import create_admin_app
from clawpod.sidecar.server.app import create_app
from clawpod.sidecar.server.front.edge import EdgeLimits
from clawpod.sidecar.server.front.serving import Listening, listen
from clawpod.sidecar.server.request.context import STATE_KEY, SidecarState
from tests.support import secret_sweep

TEST_PROVIDER_KEYS = {
    "OPENAI_API_KEY": "sk-test-openai-key",
    "ANTHROPIC_API_KEY": "sk-ant-test-key",
}
# Every test sidecar audits with a key (set suite-wide in the environment too, for sidecar
# processes and `clawc audit verify`; see tests/support/fixtures.py).
TEST_AUDIT_KEY = "test-audit-key-4f1c2a9e8b7d6c5a"


@dataclass
class RunningSidecar:
    url: str  # http://127.0.0.1:PORT
    app: web.Application
    listening: Listening
    admin: Listening  # the operator listener: /metrics, /readyz

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin.address[1]}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def state(self) -> SidecarState:
        return self.app[STATE_KEY]

    async def close(self) -> None:
        await self.admin.close()
        await self.listening.close()

    async def __aenter__(self) -> RunningSidecar:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def audit_records(state_dir: Path, agent: str) -> list[dict[str, Any]]:
    """The agent's audit records so far (none when it has no audit file yet)."""
    path = state_dir / "audit" / f"{agent}.jsonl"
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


async def audit_records_when(state_dir: Path, agent: str, count: int) -> list[dict[str, Any]]:
    """The agent's audit records once ``count`` are written (a client may be answered before
    its request's record is written)."""
    for _ in range(500):
        records = audit_records(state_dir, agent)
        if len(records) >= count:
            return records
        await asyncio.sleep(0.01)
    raise AssertionError(f"expected {count} audit records of {agent}")


async def start_sidecar(
    build_root: Path,
    state_dir: Path,
    env: Mapping[str, str] | None = None,
    limits: EdgeLimits | None = None,
) -> RunningSidecar:
    """Load ``build_root`` (digest-checked) and serve it; ``env`` defaults to test provider keys,
    and the test audit key is added unless ``env`` names one; ``limits`` are the edge's (by
    default the build's)."""
    build = load_build(build_root)
    env = {AUDIT_KEY_ENV: TEST_AUDIT_KEY, **(TEST_PROVIDER_KEYS if env is None else env)}
    secret_sweep.register_build_env(build, env)  # the suite-wide credential sweep checks these
    secret_sweep.register(env[AUDIT_KEY_ENV])
    app = create_app(build, state_dir=state_dir, env=env)
    limits = limits or EdgeLimits.from_config(build.config)
    listening = await listen(app, "127.0.0.1", 0, shutdown_timeout_s=1.0, limits=limits)
    admin = await listen(create_admin_app(app[STATE_KEY]), "127.0.0.1", 0, shutdown_timeout_s=1.0)
    port = listening.address[1]
    return RunningSidecar(url=f"http://127.0.0.1:{port}", app=app, listening=listening, admin=admin)
