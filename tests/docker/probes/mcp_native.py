"""Run inside a native agent's container: list and call its tools over the sidecar's /mcp.

argv[1]: the MCP server URL; argv[2]: JSON object of headers; argv[3]: tool to call (presented
name). Uses the official MCP Python client. Prints {"tools": [...], "result": {...}} as JSON.
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url, headers, tool = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = await session.list_tools()
        result = await session.call_tool(tool, {})
    print(
        json.dumps(
            {
                "tools": [t.name for t in listed.tools],
                "result": result.model_dump(mode="json", exclude_none=True),
            }
        )
    )


asyncio.run(main())
