"""Long tool lists on /mcp (SPEC §23), through the official MCP client in both eras:
``tools/list`` in pages of 100 with the sidecar's cursors, and ``claw_tool_search`` leading the
list of an agent with more than a page of tools (or deferred ones), answering with the best
matches among the agent's own tools and their schemas."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from mcp.shared.exceptions import MCPError

from clawpod.sidecar.mcp.tool_search import PAGE_SIZE
from clawpod.sidecar.model.tool_search import MAX_RESULTS, SEARCH_TOOL
from tests.mcp.conftest import mcp_client, native_tools
from tests.support.bigpod import DOMAINS, VERBS
from tests.support.builds import AgentSpec, http_tool, providers_for, write_build
from tests.support.services import ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, RunningSidecar, start_sidecar

MODES = ["legacy", "auto"]


def catalog(url: str, count: int) -> list:
    tools = [
        http_tool(
            domain,
            f"{verb}_{thing}",
            url,
            path=f"/{domain}/{verb}",
            annotations={"readOnlyHint": True},
            description=text.format(o=thing, d=domain),
        )
        for domain, thing in DOMAINS
        for verb, text in VERBS
    ]
    return tools[:count]


@dataclass
class Pod:
    sidecar: RunningSidecar
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        return self.sidecar.url + "/mcp"


@pytest.fixture
async def pod(tmp_path: Path, service: ToolService) -> AsyncIterator[Pod]:
    few = native_tools(service.url)
    agents = [
        AgentSpec("librarian", tools=catalog(service.url, 250), mode="native"),
        AgentSpec("picky", tools=few, mode="native", deferred=[few[1].name]),
        AgentSpec("small", tools=few, mode="native"),
        AgentSpec(
            "clash",
            tools=[*catalog(service.url, 101), http_tool("claw", "tool_search", service.url)],
            mode="native",
        ),
    ]
    tokens = write_build(tmp_path / "build", agents, providers_for("http://127.0.0.1:9/v1"))
    env = {**TEST_PROVIDER_KEYS, "SVC_TOKEN": "unused-token-value"}
    sidecar = await start_sidecar(tmp_path / "build", tmp_path / "state", env=env)
    try:
        yield Pod(sidecar, tokens)
    finally:
        await sidecar.close()


@pytest.mark.parametrize("mode", MODES)
async def test_a_long_list_comes_in_pages_led_by_the_search(pod: Pod, mode: str) -> None:
    names: list[str] = []
    cursors: list[str] = []
    async with mcp_client(pod.url, pod.tokens["librarian"], mode=mode) as client:
        cursor = None
        while True:
            listing = await client.list_tools(cursor=cursor)
            assert len(listing.tools) <= PAGE_SIZE
            names += [tool.name for tool in listing.tools]
            cursor = listing.next_cursor
            if cursor is None:
                break
            cursors.append(cursor)
    assert len(cursors) == 2  # 251 entries: pages of 100, 100 and 51
    assert names[0] == SEARCH_TOOL
    assert len(names) == len(set(names)) == 251


@pytest.mark.parametrize("mode", MODES)
async def test_a_cursor_the_sidecar_did_not_hand_out_is_refused(pod: Pod, mode: str) -> None:
    async with mcp_client(pod.url, pod.tokens["librarian"], mode=mode) as client:
        for forged in ["claw-page-0", "claw-page-9", "claw-page-" + "9" * 50, "x", ""]:
            with pytest.raises(MCPError) as raised:
                await client.list_tools(cursor=forged)
            assert "unknown cursor" in raised.value.error.message


@pytest.mark.parametrize("mode", MODES)
async def test_the_search_finds_the_agents_own_tools_with_their_schemas(
    pod: Pod, mode: str
) -> None:
    async with mcp_client(pod.url, pod.tokens["librarian"], mode=mode) as client:
        result = await client.call_tool(SEARCH_TOOL, {"query": "export the invoice data as CSV"})
        outsider = await client.call_tool(SEARCH_TOOL, {"query": "desk_place_order order"})
        many = await client.call_tool(SEARCH_TOOL, {"query": "calendar " * 100_000, "limit": 99})
    found = orjson.loads(result.content[0].text)["data"]["tools"]
    assert found[0]["name"] == "billing_export_invoice"
    assert found[0]["inputSchema"]["type"] == "object"
    # Another agent's tool is never found, even by its exact name.
    assert orjson.loads(outsider.content[0].text)["data"]["tools"] == []
    assert len(orjson.loads(many.content[0].text)["data"]["tools"]) == MAX_RESULTS


async def test_a_short_list_has_one_page_and_no_search(pod: Pod) -> None:
    async with mcp_client(pod.url, pod.tokens["small"]) as client:
        listing = await client.list_tools()
        assert listing.next_cursor is None
        assert SEARCH_TOOL not in [tool.name for tool in listing.tools]
        with pytest.raises(MCPError) as raised:
            await client.call_tool(SEARCH_TOOL, {"query": "order"})
    assert "Unknown tool" in raised.value.error.message


async def test_an_agent_with_deferred_tools_is_offered_the_search(pod: Pod) -> None:
    async with mcp_client(pod.url, pod.tokens["picky"]) as client:
        listing = await client.list_tools()
        result = await client.call_tool(SEARCH_TOOL, {"query": "place an order"})
    assert listing.tools[0].name == SEARCH_TOOL
    found = orjson.loads(result.content[0].text)["data"]["tools"]
    assert found[0]["name"] == "desk_place_order"


async def test_a_granted_tool_named_like_the_search_keeps_its_name(pod: Pod) -> None:
    async with mcp_client(pod.url, pod.tokens["clash"]) as client:
        first = await client.list_tools()
        second = await client.list_tools(cursor=first.next_cursor)
    names = [tool.name for tool in [*first.tools, *second.tools]]
    assert names[-1] == SEARCH_TOOL  # the granted tool, last as granted; no search leads
    assert names.count(SEARCH_TOOL) == 1 and len(names) == 102
