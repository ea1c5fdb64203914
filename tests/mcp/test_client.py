"""Native mode through the official MCP Python client (docs/contract.md §4.3)."""

from __future__ import annotations

import io

import mcp_types as types
import orjson
import pytest
from mcp.shared.exceptions import MCPError

from clawpod.cli.audit import verify_command
from tests.mcp.conftest import SERVICE_TOKEN, NativePod, mcp_client


@pytest.mark.filterwarnings("ignore:ping is removed")
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_handshake_negotiates_a_version(pod: NativePod, mode: str) -> None:
    """``legacy`` clients initialize a session; ``auto`` clients find the stateless era
    through ``server/discover`` (§11.3); either may ping."""
    async with mcp_client(pod.mcp_url, pod.tokens["trader"], mode=mode) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        assert client.server_info is not None and client.server_info.name == "clawpod-sidecar"
        assert client.server_capabilities.tools is not None
        # Both eras answer ping: fastmcp's Client.ping() sends it in the stateless one too.
        await client.send_ping()


async def test_tools_list_is_exactly_the_granted_tools(pod: NativePod) -> None:
    async with mcp_client(pod.mcp_url, pod.tokens["trader"]) as client:
        listing = await client.list_tools()
    by_name = {tool.name: tool for tool in listing.tools}
    assert sorted(by_name) == ["desk_broken", "desk_get_item", "desk_place_order"]
    get_item = by_name["desk_get_item"]
    assert get_item.description == "Read one item by name."
    assert get_item.title == "Get an item"
    assert get_item.input_schema["required"] == ["item"]
    assert get_item.annotations is not None and get_item.annotations.read_only_hint is True
    assert by_name["desk_place_order"].annotations.destructive_hint is True
    text = listing.model_dump_json()
    # Execution metadata never reaches an agent.
    assert pod.service.url not in text and "SVC_TOKEN" not in text and "/items/" not in text


async def test_agent_without_tools_lists_none(pod: NativePod) -> None:
    async with mcp_client(pod.mcp_url, pod.tokens["idle"]) as client:
        assert (await client.list_tools()).tools == []


async def test_mediated_agents_are_refused(pod: NativePod) -> None:
    with pytest.raises(BaseException) as raised:
        async with mcp_client(pod.mcp_url, pod.tokens["analyst"]) as client:
            await client.list_tools()
    assert "mediated mode" in mcp_error_in(raised.value).error.message
    assert pod.service.requests == []


async def test_call_runs_through_the_executor_and_is_audited(pod: NativePod) -> None:
    async with mcp_client(pod.mcp_url, pod.tokens["trader"]) as client:
        result = await client.call_tool("desk_get_item", {"item": "a/../b"})
        order = await client.call_tool(
            "desk_place_order", {"symbol": "NVDA", "side": "buy", "quantity": 2}
        )
    assert result.is_error is False
    envelope = result.structured_content
    assert envelope["ok"] is True and envelope["status"] == 200
    assert envelope["data"]["raw_path"] == "/items/a%2F..%2Fb"
    assert orjson.loads(result.content[0].text) == envelope
    assert order.structured_content["data"]["json"] == {
        "order": {"symbol": "NVDA", "side": "buy", "quantity": 2}
    }
    received = pod.service.requests
    assert [r.headers["Authorization"] for r in received] == [f"Bearer {SERVICE_TOKEN}"] * 2

    records = pod.audit("trader")
    assert len(records) == 2
    first = records[0]
    assert (first["route"], first["mode"], first["agent"]) == ("/mcp", "native", "trader")
    assert first["outcome"] == {"status": "ok", "code": None}
    [round_] = first["tool_trace"]
    [call] = round_["calls"]
    assert round_["round"] == 1
    assert call["name"] == "desk.get_item" and call["presented"] == "desk_get_item"
    assert call["arguments"] == {"item": "a/../b"} and call["status"] == 200
    assert records[1]["prev"] == first["hash"]
    everything = (pod.state_dir / "audit" / "trader.jsonl").read_text()
    assert SERVICE_TOKEN not in everything and pod.tokens["trader"] not in everything
    assert verify_command(pod.state_dir, io.StringIO()) == 0


async def test_invalid_arguments_are_a_tool_error_and_not_executed(pod: NativePod) -> None:
    async with mcp_client(pod.mcp_url, pod.tokens["trader"]) as client:
        result = await client.call_tool("desk_place_order", {"symbol": "NVDA", "side": "hold"})
    assert result.is_error is True
    error = result.structured_content["error"]
    assert error["code"] == "invalid_arguments"
    assert "$.side" in error["message"] and "'quantity' is a required property" in error["message"]
    assert pod.service.requests == []
    [record] = pod.audit("trader")
    assert record["outcome"] == {"status": "error", "code": "invalid_arguments"}
    assert record["tool_trace"][0]["calls"][0]["executed"] is False


async def test_service_failures_are_tool_errors_with_structured_content(pod: NativePod) -> None:
    async with mcp_client(pod.mcp_url, pod.tokens["trader"]) as client:
        result = await client.call_tool("desk_broken", {})
    assert result.is_error is True
    assert result.structured_content == {
        "ok": False,
        "error": {"code": "http_500", "message": "the service answered 500 Internal Server Error"},
        "status": 500,
        "data": {"detail": "database down"},
    }
    assert pod.audit("trader")[0]["outcome"] == {"status": "error", "code": "http_500"}


async def test_large_results_respect_the_agents_policy(pod: NativePod) -> None:
    pod.service.reply("/items/big", size=50_000)
    async with mcp_client(pod.mcp_url, pod.tokens["trader"]) as client:
        result = await client.call_tool("desk_get_item", {"item": "big"})
    envelope = result.structured_content
    assert envelope["truncated"] is True and envelope["original_bytes"] == 50_000
    assert len(envelope["data"]) == 2048


@pytest.mark.parametrize("name", ["vault_read_secret", "desk.get_item", "made_up_tool"])
async def test_tools_of_other_agents_or_ungranted_are_refused(pod: NativePod, name: str) -> None:
    async with mcp_client(pod.mcp_url, pod.tokens["trader"]) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool(name, {"item": "x"})
    assert raised.value.error.code == types.INVALID_PARAMS
    assert name in raised.value.error.message
    assert pod.service.requests == []
    [record] = pod.audit("trader")
    assert record["outcome"] == {"status": "error", "code": "unknown_tool"}
    assert record["tool_trace"][0]["calls"][0]["executed"] is False


def mcp_error_in(exc: BaseException) -> MCPError:
    """The MCPError a failed connect raised (the client wraps it in task-group exceptions)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    assert isinstance(exc, MCPError), exc
    return exc


async def test_missing_token_is_refused(pod: NativePod) -> None:
    with pytest.raises(BaseException) as raised:
        async with mcp_client(pod.mcp_url, None) as client:
            await client.list_tools()
    assert "missing agent token" in mcp_error_in(raised.value).error.message
    assert pod.service.requests == []


async def test_foreign_token_is_refused(pod: NativePod) -> None:
    with pytest.raises(BaseException) as raised:
        async with mcp_client(pod.mcp_url, "claw_not-a-token-of-this-pod") as client:
            await client.call_tool("desk_get_item", {"item": "x"})
    assert "does not belong" in mcp_error_in(raised.value).error.message
    assert pod.service.requests == []
    assert pod.audit("trader") == []
