"""Native calls carry an ``Idempotency-Key`` like mediated ones (SPEC §8.2): every call of a
tool that is neither read-only nor idempotent, each call its own, through the official MCP
client."""

from __future__ import annotations

from tests.mcp.conftest import NativePod, mcp_client

ORDER = {"symbol": "NVDA", "side": "buy", "quantity": 3}


async def test_each_native_order_carries_its_own_idempotency_key(pod: NativePod) -> None:
    for _ in range(2):  # the same order twice, each in a new session starting at id 1
        async with mcp_client(pod.mcp_url, pod.tokens["trader"]) as client:
            result = await client.call_tool("desk_place_order", ORDER)
            assert result.structured_content["ok"] is True
            await client.call_tool("desk_get_item", {"item": "widget"})
    orders = [r for r in pod.service.requests if r.path == "/orders"]
    keys = [order.headers.get("Idempotency-Key") for order in orders]
    assert len(keys) == 2 and all(keys) and keys[0] != keys[1]
    reads = [r for r in pod.service.requests if r.path.startswith("/items")]
    assert all("Idempotency-Key" not in read.headers for read in reads)
