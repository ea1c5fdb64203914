"""Run inside a native agent's container: call one tool, with arguments, over the sidecar's /mcp.

argv[1]: the runner's MCP client config (the compiled mcp.json); argv[2]: a substring of the
tool to call; argv[3]: its arguments as JSON. The call may wait for an operator's approval.
Uses the official MCP Python client. Prints {"result": {...}} as JSON.
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
        result = await session.call_tool(tool, json.loads(sys.argv[3]))
    print(json.dumps({"result": result.model_dump(mode="json", by_alias=True, exclude_none=True)}))


asyncio.run(main())
