"""How the executor turns a validated call into an HTTP request (docs/contract.md §4.2 point 7)."""

from __future__ import annotations

import base64
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from yarl import URL

from clawpod.sidecar.backends.http import build_request
from clawpod.sidecar.execution.executor import ToolExecutor
from clawpod.sidecar.manifest import ToolAuth
from tests.support.builds import http_tool
from tests.support.services import ToolService
from tests.support.tool_calls import run_tool

STRING_ARG = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}


async def call(executor: ToolExecutor, tool, arguments, agent: str = "analyst"):
    return await run_tool(executor, agent, tool, arguments)


@pytest.mark.parametrize(
    ("value", "wire_segment"),
    [
        ("a/b", "a%2Fb"),
        ("../../admin", "..%2F..%2Fadmin"),
        ("x?admin=1#frag", "x%3Fadmin%3D1%23frag"),
        ("already%2Fencoded", "already%252Fencoded"),
        ("line\r\nX-Injected: 1", "line%0D%0AX-Injected%3A%201"),
        ("nul\x00byte", "nul%00byte"),
        ("ünï cødé", "%C3%BCn%C3%AF%20c%C3%B8d%C3%A9"),
        ("...", "..."),
    ],
)
async def test_path_values_stay_one_segment(
    executor: ToolExecutor, service: ToolService, value: str, wire_segment: str
) -> None:
    tool = http_tool("svc", "get_item", service.url, path="/items/{item}/detail", schema=STRING_ARG)
    outcome = await call(executor, tool, {"item": value})
    assert outcome.ok, outcome.envelope
    [request] = service.requests
    assert request.method == "GET"
    assert request.raw_path == f"/items/{wire_segment}/detail"
    assert "X-Injected" not in request.headers


@pytest.mark.parametrize("value", [".", "..", ""])
async def test_dot_segments_are_refused(
    executor: ToolExecutor, service: ToolService, value: str
) -> None:
    tool = http_tool("svc", "get_item", service.url, path="/items/{item}", schema=STRING_ARG)
    outcome = await call(executor, tool, {"item": value})
    assert outcome.error_code == "invalid_arguments"
    assert "'item'" in outcome.envelope["error"]["message"]
    assert not outcome.executed
    assert service.requests == []


@settings(max_examples=300, deadline=None)
@given(value=st.text(min_size=1).filter(lambda v: v not in (".", "..")))
def test_any_path_value_decodes_back_to_exactly_one_segment(value: str) -> None:
    tool = http_tool(
        "svc", "get_item", "http://svc:4000/base", path="/items/{item}/x", schema=STRING_ARG
    )
    parts = ("/items/", "item", "/x")
    request = build_request(tool, parts, "http://svc:4000/base", "analyst", {"item": value}, {})
    url = URL(str(request.url))
    assert (url.host, url.port) == ("svc", 4000)
    assert url.raw_query_string == "" and url.raw_fragment == ""
    assert url.raw_parts[:3] == ("/", "base", "items") and url.raw_parts[-1] == "x"
    assert len(url.raw_parts) == 5
    assert unquote(url.raw_parts[3], errors="strict") == value


async def test_claw_id_is_the_agent_and_never_an_argument(
    executor: ToolExecutor, service: ToolService
) -> None:
    tool = http_tool("svc", "context", service.url, path="/api/v1/market_context/{claw_id}")
    outcome = await call(executor, tool, {}, agent="analyst-0")
    assert outcome.ok
    [request] = service.requests
    assert request.raw_path == "/api/v1/market_context/analyst-0"


@pytest.mark.parametrize(
    ("method", "path", "body_key"),
    [
        ("GET", "/api/v1/market_context/{claw_id}", None),  # was dropped silently
        ("GET", "/api/v1/positions", None),  # went on as ?claw_id=bob
        ("POST", "/api/v1/trades", "trade"),  # went into {"trade": {..., "claw_id": "bob"}}
    ],
)
async def test_a_claw_id_argument_is_refused_and_nothing_is_sent(
    executor: ToolExecutor, service: ToolService, method: str, path: str, body_key: str | None
) -> None:
    tool = http_tool("svc", "op", service.url, method=method, path=path, body_key=body_key)
    outcome = await call(executor, tool, {"symbol": "X", "claw_id": "bob"}, agent="analyst-0")
    assert outcome.error_code == "invalid_arguments"
    assert "claw_id" in outcome.envelope["error"]["message"]
    assert not outcome.executed and service.requests == []


async def test_get_arguments_go_to_the_query_string(
    executor: ToolExecutor, service: ToolService
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "symbol": {"type": "string"},
            "limit": {"type": "integer"},
            "live": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "filter": {"type": "object"},
            "cursor": {"type": ["string", "null"]},
        },
    }
    tool = http_tool("svc", "quotes", service.url, path="/quotes", schema=schema)
    arguments = {
        "symbol": "BRK.B&x=1",
        "limit": 5,
        "live": True,
        "tags": ["a b", "c"],
        "filter": {"min": 1},
        "cursor": None,
    }
    outcome = await call(executor, tool, arguments)
    assert outcome.ok
    [request] = service.requests
    assert request.query == {
        "symbol": ["BRK.B&x=1"],
        "limit": ["5"],
        "live": ["true"],
        "tags": ["a b", "c"],
        "filter": ['{"min":1}'],
    }
    assert request.body == b""


async def test_delete_uses_query_and_post_uses_wrapped_json_body(
    executor: ToolExecutor, service: ToolService
) -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string"}, "qty": {"type": "number"}}}
    delete = http_tool(
        "svc", "cancel", service.url, method="DELETE", path="/orders/{id}", schema=schema
    )
    post = http_tool(
        "svc", "trade", service.url, method="POST", path="/trades", schema=schema, body_key="trade"
    )
    put = http_tool("svc", "replace", service.url, method="PUT", path="/orders/{id}", schema=schema)
    assert (await call(executor, delete, {"id": "o-1", "qty": 2})).ok
    assert (await call(executor, post, {"id": "o-2", "qty": 1.5})).ok
    assert (await call(executor, put, {"id": "o-3", "qty": 3})).ok
    cancel, trade, replace = service.requests
    assert (cancel.method, cancel.raw_path, cancel.body) == ("DELETE", "/orders/o-1?qty=2", b"")
    assert (trade.method, trade.raw_path) == ("POST", "/trades")
    assert trade.headers["Content-Type"] == "application/json"
    assert trade.json() == {"trade": {"id": "o-2", "qty": 1.5}}
    assert (replace.method, replace.raw_path, replace.json()) == ("PUT", "/orders/o-3", {"qty": 3})


@pytest.mark.parametrize(
    ("auth", "header", "expected"),
    [
        (ToolAuth(type="bearer", env="SVC_TOKEN"), "Authorization", "Bearer tok-very-secret-1"),
        (
            ToolAuth(type="header", env="SVC_TOKEN", header="X-Api-Key"),
            "X-Api-Key",
            "tok-very-secret-1",
        ),
        (
            ToolAuth(type="basic", env="SVC_BASIC"),
            "Authorization",
            "Basic " + base64.b64encode(b"alice:pa55-secret").decode(),
        ),
    ],
)
async def test_credentials_come_from_the_environment_by_name(
    executor: ToolExecutor, service: ToolService, auth: ToolAuth, header: str, expected: str
) -> None:
    service.require_header(header, expected)
    tool = http_tool("svc", "secure", service.url, auth=auth)
    outcome = await call(executor, tool, {})
    assert outcome.ok, outcome.envelope
    assert "secret" not in outcome.envelope_json()


async def test_no_auth_sends_no_authorization(executor: ToolExecutor, service: ToolService) -> None:
    tool = http_tool("svc", "open", service.url)
    assert (await call(executor, tool, {})).ok
    assert "Authorization" not in service.requests[0].headers


async def test_missing_credential_is_named_and_nothing_is_sent(service: ToolService) -> None:
    executor = ToolExecutor(env={"OTHER": "x"})
    await executor.start()
    try:
        tool = http_tool(
            "svc", "secure", service.url, auth=ToolAuth(type="bearer", env="SVC_TOKEN")
        )
        outcome = await call(executor, tool, {})
    finally:
        await executor.close()
    assert outcome.error_code == "credential_missing"
    assert "SVC_TOKEN" in outcome.envelope["error"]["message"]
    assert not outcome.executed and outcome.status is None
    assert service.requests == []


async def test_basic_credential_without_colon_is_reported_without_its_value(
    service: ToolService,
) -> None:
    executor = ToolExecutor(env={"SVC_BASIC": "no-colon-secret"})
    await executor.start()
    try:
        tool = http_tool("svc", "secure", service.url, auth=ToolAuth(type="basic", env="SVC_BASIC"))
        outcome = await call(executor, tool, {})
    finally:
        await executor.close()
    assert outcome.error_code == "credential_missing"
    assert "SVC_BASIC" in outcome.envelope_json()
    assert "no-colon-secret" not in outcome.envelope_json()
    assert service.requests == []


async def test_only_the_manifest_host_is_contacted(
    executor: ToolExecutor, service: ToolService
) -> None:
    schema = {"type": "object", "properties": {"u": {"type": "string"}}}
    tool = http_tool("svc", "fetch", service.url, path="/fetch/{u}", schema=schema)
    outcome = await call(executor, tool, {"u": "@evil.example:80/steal"})
    assert outcome.ok
    assert service.requests[0].raw_path == "/fetch/%40evil.example%3A80%2Fsteal"


async def test_connections_are_kept_alive_and_reused(
    executor: ToolExecutor, service: ToolService
) -> None:
    tool = http_tool("svc", "ping", service.url)
    for _ in range(20):
        assert (await call(executor, tool, {})).ok
    assert executor.connections.created == 1
    assert executor.connections.reused == 19


@pytest.mark.parametrize(
    "echo",
    [
        "wrong password: pa55-secret",  # the password alone, as a service's error may name it
        b"alice:pa55-secret".hex(),
        b"alice:pa55-secret".hex().upper(),
    ],
)
async def test_a_service_echoing_its_basic_credential_in_any_form_is_redacted(
    executor: ToolExecutor, service: ToolService, echo: str
) -> None:
    service.reply(json={"detail": echo})
    tool = http_tool("svc", "secure", service.url, auth=ToolAuth(type="basic", env="SVC_BASIC"))
    outcome = await call(executor, tool, {})
    assert "[redacted]" in outcome.envelope_json()
    assert "pa55" not in outcome.envelope_json()
    assert echo.removeprefix("wrong password: ") not in outcome.envelope_json()
