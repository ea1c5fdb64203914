"""The Streamable HTTP transport on the wire: sessions, headers, errors, JSON and SSE answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import mcp_types as types
import orjson
import pytest

from clawpod.sidecar.mcp.sessions import SessionStore
from tests.mcp.conftest import NativePod

BOTH = "application/json, text/event-stream"
INIT_PARAMS = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "wire-test", "version": "1"},
}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


class Wire:
    def __init__(self, http: aiohttp.ClientSession, pod: NativePod, agent: str = "trader") -> None:
        self.http = http
        self.pod = pod
        self.token: str | None = pod.tokens[agent]
        self.session_id: str | None = None
        self.version: str | None = None

    def headers(self, accept: str, extra: dict[str, str] | None) -> dict[str, str]:
        headers = {"Accept": accept, "Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        return headers | (extra or {})

    async def post(
        self, payload: Any, *, accept: str = BOTH, raw: bytes | None = None, **extra: str
    ) -> tuple[int, aiohttp.typedefs.LooseHeaders, Any]:
        body = raw if raw is not None else orjson.dumps(payload)
        async with self.http.post(
            self.pod.mcp_url, data=body, headers=self.headers(accept, extra)
        ) as response:
            text = await response.read()
            if response.content_type == "text/event-stream":
                return response.status, response.headers, sse_messages(text)
            return response.status, response.headers, orjson.loads(text) if text else None

    async def initialize(self, version: str = "2025-06-18") -> dict[str, Any]:
        params = INIT_PARAMS | {"protocolVersion": version}
        status, headers, body = await self.post(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        )
        assert status == 200, body
        self.session_id = headers["Mcp-Session-Id"]
        self.version = body["result"]["protocolVersion"]
        status, _, _ = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert status == 202
        return body

    async def request(self, method: str, params: Any = None, id_: Any = 1, **kwargs: Any):
        message = {"jsonrpc": "2.0", "id": id_, "method": method}
        if params is not None:
            message["params"] = params
        return await self.post(message, **kwargs)


def sse_messages(text: bytes) -> list[Any]:
    messages = []
    for event in text.split(b"\n\n"):
        data = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            messages.append(orjson.loads(b"\n".join(data)))
    return messages


@pytest.fixture
def wire(http: aiohttp.ClientSession, pod: NativePod) -> Wire:
    return Wire(http, pod)


async def test_initialize_issues_a_session_and_a_valid_result(wire: Wire) -> None:
    body = await wire.initialize()
    result = types.InitializeResult.model_validate(body["result"])
    assert result.protocol_version == "2025-06-18"
    assert result.capabilities.tools is not None
    assert wire.session_id and all(0x21 <= ord(c) <= 0x7E for c in wire.session_id)


@pytest.mark.parametrize(
    ("offered", "answered"),
    [("2025-03-26", "2025-03-26"), ("2025-11-25", "2025-11-25"), ("2099-01-01", "2025-11-25")],
)
async def test_version_negotiation(wire: Wire, offered: str, answered: str) -> None:
    body = await wire.initialize(offered)
    assert body["result"]["protocolVersion"] == answered


async def test_tools_list_and_call_results_validate_against_mcp_types(wire: Wire) -> None:
    await wire.initialize()
    _, _, listing = await wire.request("tools/list")
    tools = types.ListToolsResult.model_validate(listing["result"]).tools
    assert {t.name for t in tools} == {"desk_get_item", "desk_place_order", "desk_broken"}
    status, headers, messages = await wire.request(
        "tools/call", {"name": "desk_get_item", "arguments": {"item": "x"}}, id_="call-7"
    )
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    [answer] = messages
    assert answer["id"] == "call-7"
    result = types.CallToolResult.model_validate(answer["result"])
    assert result.is_error is False and result.structured_content["ok"] is True


async def test_json_only_clients_get_json_for_calls(wire: Wire) -> None:
    await wire.initialize()
    status, headers, body = await wire.request(
        "tools/call",
        {"name": "desk_get_item", "arguments": {"item": "x"}},
        accept="application/json",
    )
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert body["result"]["isError"] is False


async def test_sse_only_clients_get_sse_for_everything(wire: Wire) -> None:
    status, headers, messages = await wire.request(
        "initialize", INIT_PARAMS, accept="text/event-stream"
    )
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert messages[0]["result"]["protocolVersion"] == "2025-06-18"
    assert headers["Mcp-Session-Id"]


async def test_calls_before_2025_06_18_carry_no_structured_content(wire: Wire) -> None:
    await wire.initialize("2025-03-26")
    _, _, [answer] = await wire.request(
        "tools/call", {"name": "desk_get_item", "arguments": {"item": "x"}}
    )
    assert "structuredContent" not in answer["result"]
    assert orjson.loads(answer["result"]["content"][0]["text"])["ok"] is True


async def test_ping_and_unknown_methods(wire: Wire) -> None:
    await wire.initialize()
    status, _, body = await wire.request("ping", id_=5)
    assert (status, body) == (200, {"jsonrpc": "2.0", "id": 5, "result": {}})
    status, _, body = await wire.request("resources/list", id_=6)
    assert status == 200 and body["id"] == 6
    assert body["error"]["code"] == types.METHOD_NOT_FOUND


async def test_a_method_of_the_stateless_era_is_unknown_in_a_session(wire: Wire) -> None:
    """Each era answers only its own methods: server/discover exists only without a session."""
    await wire.initialize()
    status, _, body = await wire.request("server/discover", id_=7)
    assert status == 200 and body["id"] == 7
    assert body["error"]["code"] == types.METHOD_NOT_FOUND


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{not json", types.PARSE_ERROR),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}', types.INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 1}', types.INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', types.INVALID_REQUEST),
        (b'{"jsonrpc": "2.0", "id": 1, "method": 7}', types.INVALID_REQUEST),
        (b"[]", types.INVALID_REQUEST),
        (b'"just a string"', types.INVALID_REQUEST),
    ],
)
async def test_malformed_input_gets_jsonrpc_errors(wire: Wire, raw: bytes, code: int) -> None:
    await wire.initialize()
    status, _, body = await wire.post(None, raw=raw)
    assert status == 400
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["code"] == code


async def test_invalid_params_are_reported(wire: Wire) -> None:
    await wire.initialize()
    _, _, [answer] = await wire.request("tools/call", {"arguments": {}})
    assert answer["error"]["code"] == types.INVALID_PARAMS and "name" in answer["error"]["message"]
    _, _, [answer] = await wire.request("tools/call", {"name": "desk_get_item", "arguments": [1]})
    assert answer["error"]["code"] == types.INVALID_PARAMS
    status, _, body = await wire.request("initialize", {"capabilities": {}})
    assert status == 400 and body["error"]["code"] == types.INVALID_PARAMS
    assert wire.pod.service.requests == []


async def test_requests_need_a_session(wire: Wire) -> None:
    status, _, body = await wire.request("tools/list")
    assert status == 400 and "Mcp-Session-Id" in body["error"]["message"]
    wire.session_id = "no-such-session"
    status, _, body = await wire.request("tools/list")
    assert status == 404 and body["error"]["code"] == types.INVALID_REQUEST


async def test_delete_ends_the_session(wire: Wire) -> None:
    await wire.initialize()
    async with wire.http.delete(wire.pod.mcp_url, headers=wire.headers(BOTH, None)) as response:
        assert response.status == 204
    status, _, _ = await wire.request("tools/list")
    assert status == 404
    async with wire.http.delete(wire.pod.mcp_url, headers=wire.headers(BOTH, None)) as response:
        assert response.status == 404


async def test_get_offers_no_stream(wire: Wire) -> None:
    await wire.initialize()
    async with wire.http.get(
        wire.pod.mcp_url, headers=wire.headers("text/event-stream", None)
    ) as response:
        assert response.status == 405
        assert response.headers["Allow"] == "POST, DELETE"


async def test_sessions_are_bound_to_their_agent(
    http: aiohttp.ClientSession, pod: NativePod
) -> None:
    owner = Wire(http, pod, "trader")
    await owner.initialize()
    intruder = Wire(http, pod, "auditor")
    intruder.session_id, intruder.version = owner.session_id, owner.version
    status, _, body = await intruder.request(
        "tools/call", {"name": "desk_get_item", "arguments": {"item": "x"}}
    )
    assert status == 404 and "error" in body
    async with http.delete(pod.mcp_url, headers=intruder.headers(BOTH, None)) as response:
        assert response.status == 404
    status, _, _ = await owner.request("tools/list")
    assert status == 200
    assert pod.service.requests == [] and pod.audit("auditor") == []


async def test_unsupported_protocol_version_header_is_refused(wire: Wire) -> None:
    await wire.initialize()
    wire.version = "1900-01-01"
    status, _, body = await wire.request("tools/list")
    assert status == 400 and "1900-01-01" in body["error"]["message"]


async def test_notifications_and_responses_are_accepted_without_body(wire: Wire) -> None:
    await wire.initialize()
    status, _, body = await wire.post(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    )
    assert (status, body) == (202, None)
    status, _, body = await wire.post({"jsonrpc": "2.0", "id": 9, "result": {}})
    assert (status, body) == (202, None)


async def test_batches_only_where_the_protocol_has_them(wire: Wire) -> None:
    await wire.initialize("2025-03-26")
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    status, _, body = await wire.post(batch, accept="application/json")
    assert status == 200 and [m["id"] for m in body] == [1, 2]
    await wire.initialize("2025-06-18")
    status, _, body = await wire.post(batch, accept="application/json")
    assert status == 400 and body["error"]["code"] == types.INVALID_REQUEST


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Accept": "text/html"}, 406),
        ({"Content-Type": "text/plain"}, 415),
        # The standard library's MIME parser under aiohttp raises on this one (found by fuzzing).
        ({"Content-Type": ";0*"}, 415),
        ({"Origin": "http://evil.example"}, 403),
    ],
)
async def test_bad_headers_are_refused(wire: Wire, headers: dict[str, str], status: int) -> None:
    got, _, body = await wire.request("initialize", INIT_PARAMS, **headers)
    assert got == status and body["error"]["code"] == types.INVALID_REQUEST


async def test_same_origin_browsers_are_allowed(wire: Wire) -> None:
    origin = wire.pod.sidecar.url
    status, _, _ = await wire.request("initialize", INIT_PARAMS, Origin=origin)
    assert status == 200


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("claw_wrong", 403)])
async def test_authentication_statuses(wire: Wire, token: str | None, status: int) -> None:
    wire.token = token
    got, _, body = await wire.request("initialize", INIT_PARAMS)
    assert got == status and body["jsonrpc"] == "2.0" and body["error"]["message"]


async def test_a_call_completes_and_is_audited_when_the_client_disconnects(
    wire: Wire, pod: NativePod
) -> None:
    await wire.initialize()
    pod.service.reply("/items/slow", delay_s=0.5)
    request = asyncio.create_task(
        wire.request("tools/call", {"name": "desk_get_item", "arguments": {"item": "slow"}})
    )
    while not pod.service.requests:
        await asyncio.sleep(0.01)
    request.cancel()  # closes the client's connection mid-call
    with pytest.raises(asyncio.CancelledError):
        await request
    for _ in range(200):
        if pod.audit("trader"):
            break
        await asyncio.sleep(0.01)
    [record] = pod.audit("trader")
    assert pod.service.completed == 1
    assert record["tool_trace"][0]["calls"][0]["status"] == 200


def test_session_store_is_bounded_per_agent_and_overall() -> None:
    store = SessionStore(max_sessions=5, max_per_agent=3)
    first = store.create("a", "2025-06-18")
    for _ in range(3):
        store.create("a", "2025-06-18")
    assert store.get(first.id, "a") is None  # the agent's oldest made room
    others = [store.create(f"agent-{n}", "2025-06-18") for n in range(4)]
    assert len(store) == 5
    assert store.get(others[-1].id, "agent-3") is not None
    assert store.get(others[-1].id, "a") is None


async def test_slow_calls_stream_keepalives_before_the_result(wire: Wire, pod: NativePod) -> None:
    pod.sidecar.state.mcp.keepalive_s = 0.05
    pod.service.reply("/items/slow", delay_s=0.4)
    await wire.initialize()
    message = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "desk_get_item", "arguments": {"item": "slow"}},
    }
    async with wire.http.post(
        pod.mcp_url, data=orjson.dumps(message), headers=wire.headers(BOTH, None)
    ) as response:
        raw = await response.read()
    assert raw.startswith(b": keep-alive\n\n")
    [answer] = sse_messages(raw)
    assert answer["id"] == 3 and answer["result"]["isError"] is False
