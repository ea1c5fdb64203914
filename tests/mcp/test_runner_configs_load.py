"""The runner configs clawc writes under agents/ (contract §7.5) load as they are: the official
MCP client reads the ``mcpServers`` file, langchain-mcp-adapters its own connections file
(in the runner matrix, where it is installed)."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from clawpod.compiler.output.runner_configs import SERVER_NAME, langchain_config, mcp_config
from tests.mcp.conftest import NativePod
from tests.runners.conftest import RUNNER_TIMEOUT_S, runner_binary


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_official_client_loads_the_mcp_servers_file(pod: NativePod, mode: str) -> None:
    server = mcp_config(pod.mcp_url, pod.tokens["trader"])["mcpServers"][SERVER_NAME]
    # Exactly what an mcpServers reader needs for Streamable HTTP, and nothing else.
    assert set(server) == {"type", "url", "headers"} and server["type"] == "http"
    async with (
        create_mcp_http_client(headers=server["headers"]) as http,
        Client(streamable_http_client(server["url"], http_client=http), mode=mode) as client,
    ):
        names = [tool.name for tool in (await client.list_tools()).tools]
        await client.send_ping()
    assert "desk_get_item" in names


LANGCHAIN = textwrap.dedent(
    """
    import asyncio, json, sys
    from langchain_mcp_adapters.client import MultiServerMCPClient

    async def main() -> None:
        connections = json.load(open(sys.argv[1]))
        tools = await MultiServerMCPClient(connections).get_tools()
        print(json.dumps(sorted(tool.name for tool in tools)))

    asyncio.run(main())
    """
)


@pytest.mark.runners
async def test_langchain_mcp_adapters_loads_its_file_as_is(pod: NativePod, tmp_path: Path) -> None:
    python = runner_binary("python", venv="langchain-mcp-adapters")
    config = tmp_path / "trader.langchain.json"
    config.write_text(json.dumps(langchain_config(pod.mcp_url, pod.tokens["trader"])))
    # The sidecar serves from this event loop: the runner runs beside it, not blocking it.
    process = await asyncio.create_subprocess_exec(
        str(python),
        "-c",
        LANGCHAIN,
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), RUNNER_TIMEOUT_S)
    assert process.returncode == 0, err.decode()
    assert "desk_get_item" in json.loads(out)
