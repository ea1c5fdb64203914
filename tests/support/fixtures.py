"""Fixtures shared by several test areas (registered suite-wide in tests/conftest.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clawpod.sidecar.audit.log import AUDIT_KEY_ENV
from clawpod.sidecar.observability import tracing
from tests.support import secret_sweep
from tests.support.services import ToolService
from tests.support.sidecar import TEST_AUDIT_KEY
from tests.support.upstream import StubUpstream


@pytest.fixture(autouse=True, scope="session")
def audit_key_in_environment() -> Iterator[None]:
    """Sidecar processes the suite starts and `clawc audit verify` read the audit key from the
    environment: give them the test key, so the keyed chain is what the suite exercises."""
    before = os.environ.get(AUDIT_KEY_ENV)
    os.environ[AUDIT_KEY_ENV] = TEST_AUDIT_KEY
    secret_sweep.register(TEST_AUDIT_KEY)
    yield
    if before is None:
        del os.environ[AUDIT_KEY_ENV]
    else:
        os.environ[AUDIT_KEY_ENV] = before


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


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the test, every finished span kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    yield exporter
    tracing.use_provider(None)
