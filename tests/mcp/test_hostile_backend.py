"""A hostile MCP service cannot exhaust the sidecar (issue 30): a huge ``tools/call`` result is
cut while it arrives (the result limit plus a margin), and a tool list is bounded in pages,
tools and time, a repeated cursor refused, in the drift check and in ``clawc discover`` alike.
The official MCP client runs inside; the service is a local aiohttp server."""

from __future__ import annotations

import asyncio
import time

import pytest

from clawpod.cli.discover import fetch_descriptor
from clawpod.compiler.errors import CompileError
from clawpod.sidecar.backends.mcp import (
    MAX_LIST_PAGES,
    MAX_LISTING_BYTES,
    ListingRefused,
    McpBackends,
)
from clawpod.sidecar.backends.mcp_http import result_bound
from clawpod.sidecar.manifest import Execution, ManagedTool, ToolAuth
from tests.support.hostile_mcp import FAT_PAGE_BYTES, HUGE_RESULT_BYTES, running_hostile_mcp

GUARD_S = 20.0  # against a hang, never a timing assertion
RESULT_LIMIT = 16384


def _tool(url: str) -> ManagedTool:
    base_url, path = url.rsplit("/", 1)
    return ManagedTool(
        name="hostile.dump",
        presented="hostile_dump",
        description="Returns everything.",
        inputSchema={"type": "object", "properties": {}},
        execution=Execution(
            transport="mcp",
            service="hostile",
            base_url=base_url,
            path="/" + path,
            tool="dump",
            auth=ToolAuth(type="none"),
        ),
    )


async def test_a_huge_result_is_cut_while_it_arrives() -> None:
    async with running_hostile_mcp() as service:
        backends = McpBackends({})
        try:
            outcome = await asyncio.wait_for(
                backends.call(
                    _tool(service.url),
                    {},
                    timeout_s=GUARD_S,
                    max_result_bytes=RESULT_LIMIT,
                    started=time.perf_counter(),
                ),
                GUARD_S,
            )
        finally:
            await backends.close()
    assert outcome.envelope["ok"] is False
    assert outcome.envelope["error"]["code"] == "result_too_large", outcome.envelope
    assert str(result_bound(RESULT_LIMIT)) in outcome.envelope["error"]["message"]
    assert outcome.executed  # the tool ran: its answer was refused, not its call
    # Read up to the bound, not to the end (socket buffers hold a few MB at most).
    assert service.result_bytes_sent < HUGE_RESULT_BYTES // 4


@pytest.mark.parametrize(
    ("listing", "reason"),
    [
        ("endless", f"past {MAX_LIST_PAGES} pages"),
        ("repeated", "repeated a page cursor"),
        ("huge page", "more than 5000 tools"),
        # 100 pages of 6 MiB each were all read (600 MB held), each under the page bound.
        ("fat pages", f"larger than {MAX_LISTING_BYTES} bytes"),
    ],
)
async def test_a_hostile_tool_list_is_refused_in_the_drift_check(listing, reason: str) -> None:
    async with running_hostile_mcp(listing) as service:
        backends = McpBackends({})
        tool = _tool(service.url)
        try:
            with pytest.raises(ListingRefused, match=reason):
                await asyncio.wait_for(
                    backends.list_tools(backends.key_for(tool.execution, tool)), GUARD_S
                )
        finally:
            await backends.close()
    assert service.pages_served <= MAX_LIST_PAGES
    if listing == "fat pages":
        assert service.pages_served <= MAX_LISTING_BYTES // FAT_PAGE_BYTES + 1


async def test_clawc_discover_refuses_an_endless_tool_list() -> None:
    async with running_hostile_mcp("endless") as service:
        with pytest.raises(CompileError, match=f"past {MAX_LIST_PAGES} pages"):
            await asyncio.wait_for(fetch_descriptor(service.url), GUARD_S)
    assert service.pages_served <= MAX_LIST_PAGES
