from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from clawpod.sidecar.execution.executor import ToolExecutor
from clawpod.sidecar.observability.metrics import Metrics


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def env() -> dict[str, str]:
    return {"SVC_TOKEN": "tok-very-secret-1", "SVC_BASIC": "alice:pa55-secret"}


@pytest.fixture
async def executor(env: dict[str, str], metrics: Metrics) -> AsyncIterator[ToolExecutor]:
    running = ToolExecutor(env=env, metrics=metrics)
    await running.start()
    yield running
    await running.close()
