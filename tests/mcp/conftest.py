"""A running sidecar with native agents, their tool services, and official MCP clients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from clawpod.sidecar.manifest import ToolAuth, ToolPolicy
from tests.support.builds import TRADE_SCHEMA, AgentSpec, http_tool, providers_for, write_build
from tests.support.services import ToolService
from tests.support.sidecar import (
    TEST_PROVIDER_KEYS,
    RunningSidecar,
    audit_records,
    start_sidecar,
)

SERVICE_TOKEN = "svc-secret-token-value"
ITEM_SCHEMA = {
    "type": "object",
    "properties": {"item": {"type": "string", "minLength": 1}},
    "required": ["item"],
}


@dataclass
class NativePod:
    sidecar: RunningSidecar
    service: ToolService
    tokens: dict[str, str]
    state_dir: Path

    @property
    def mcp_url(self) -> str:
        return self.sidecar.url + "/mcp"

    def audit(self, agent: str) -> list[dict[str, Any]]:
        return audit_records(self.state_dir, agent)


def native_tools(base_url: str) -> list:
    auth = ToolAuth(type="bearer", env="SVC_TOKEN")
    return [
        http_tool(
            "desk",
            "get_item",
            base_url,
            path="/items/{item}",
            schema=ITEM_SCHEMA,
            annotations={"readOnlyHint": True, "title": "Get an item"},
            auth=auth,
            description="Read one item by name.",
        ),
        http_tool(
            "desk",
            "place_order",
            base_url,
            method="POST",
            path="/orders",
            schema=TRADE_SCHEMA,
            annotations={"destructiveHint": True},
            body_key="order",
            auth=auth,
            description="Place an order.",
        ),
        http_tool("desk", "broken", base_url, path="/broken", auth=auth),
    ]


@pytest.fixture
async def pod(tmp_path: Path, service: ToolService) -> AsyncIterator[NativePod]:
    service.reply("/broken", status=500, json={"detail": "database down"})
    service.require_header("Authorization", f"Bearer {SERVICE_TOKEN}")
    secret_tool = http_tool("vault", "read_secret", service.url, path="/vault/{claw_id}")
    agents = [
        AgentSpec(
            "trader",
            tools=native_tools(service.url),
            mode="native",
            policy=ToolPolicy(timeout_per_tool_ms=2000, max_tool_result_bytes=2048),
        ),
        AgentSpec("auditor", tools=[secret_tool], mode="native"),
        AgentSpec("idle", tools=[], mode="native"),
        AgentSpec("analyst", tools=native_tools(service.url), mode="mediated"),
    ]
    tokens = write_build(
        tmp_path / "build", agents, providers_for(openai_url="http://127.0.0.1:9/v1")
    )
    state_dir = tmp_path / "state"
    env = {**TEST_PROVIDER_KEYS, "SVC_TOKEN": SERVICE_TOKEN}
    sidecar = await start_sidecar(tmp_path / "build", state_dir, env=env)
    try:
        yield NativePod(sidecar, service, tokens, state_dir)
    finally:
        await sidecar.close()


@asynccontextmanager
async def mcp_client(url: str, token: str | None, mode: str = "legacy") -> AsyncIterator[Client]:
    """The official MCP client over Streamable HTTP, authenticated with an agent token."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client
