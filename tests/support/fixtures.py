"""Fixtures shared by several test areas (registered suite-wide in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.services import ToolService
from tests.support.upstream import StubUpstream


@pytest.fixture
async def service() -> AsyncIterator[ToolService]:
    """A real local HTTP tool service."""
    async with ToolService() as running:
        yield running


@pytest.fixture
async def upstream() -> AsyncIterator[StubUpstream]:
    """A local stand-in for the OpenAI and Anthropic APIs."""
    async with StubUpstream() as stub:
        yield stub
