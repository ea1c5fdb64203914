"""Run inside a native agent's container: list and call a tool over the sidecar's /mcp.

argv[1]: the runner's MCP client config (the compiled mcp.json, mounted in the container);
argv[2]: a substring of the tool to call; argv[3], optional: its arguments as JSON (the call may
wait for an operator's approval). The config's ``${VAR}`` references are expanded from
the container's environment, as MCP clients do. Uses the official MCP Python client.
Prints {"tools": [...], "result": {...}} as JSON.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        (server,) = json.load(handle)["mcpServers"].values()
    headers = {name: os.path.expandvars(value) for name, value in server["headers"].items()}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=300) as http,
        streamable_http_client(server["url"], http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = await session.list_tools()
        tool = next(t.name for t in listed.tools if sys.argv[2] in t.name)
        arguments = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
        result = await session.call_tool(tool, arguments)
    print(
        json.dumps(
            {
                "tools": [t.name for t in listed.tools],
                "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
            }
        )
    )


asyncio.run(main())
