from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.execution.test_governance import Desk
from tests.operators.desk import start_desk
from tests.support.services import ToolService
from tests.support.upstream import StubUpstream


@pytest.fixture
async def desk(tmp_path: Path, service: ToolService) -> AsyncIterator[Desk]:
    """The trading desk pod (tests/operators/desk.py) with its sidecar running."""
    async with StubUpstream() as upstream:
        running = await start_desk(tmp_path, service, upstream)
        try:
            yield running
        finally:
            await running.sidecar.close()
