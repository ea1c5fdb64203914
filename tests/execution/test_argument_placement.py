"""Arguments a descriptor places in the query beside a JSON body, or in headers, and a service
credential sent as a query parameter (docs/compiler.md; what OpenAPI documents ask for)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from clawpod.sidecar.execution.executor import ToolExecutor
from clawpod.sidecar.manifest import ToolAuth
from clawpod.sidecar.observability.metrics import Metrics
from tests.support.builds import http_tool
from tests.support.services import ToolService
from tests.support.tool_calls import run_tool

QUERY_KEY = "key with/slash&amp=1"  # its percent-encoding differs from the text
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "dry_run": {"type": "boolean"},
        "request_id": {"type": ["string", "integer"]},
        "trace": {},
    },
}


@pytest.fixture
async def executor() -> AsyncIterator[ToolExecutor]:
    running = ToolExecutor(env={"SVC_KEY": QUERY_KEY}, metrics=Metrics())
    await running.start()
    yield running
    await running.close()


def placed_tool(url: str, **execution: object):
    tool = http_tool("svc", "create", url, method="POST", path="/items", schema=SCHEMA)
    return tool.model_copy(update={"execution": tool.execution.model_copy(update=execution)})


async def test_query_and_header_arguments_leave_the_json_body(
    executor: ToolExecutor, service: ToolService
) -> None:
    tool = placed_tool(service.url, query=["dry_run"], headers={"request_id": "X-Request-Id"})
    arguments = {"name": "Rex", "dry_run": True, "request_id": 42}
    outcome = await run_tool(executor, "analyst", tool, arguments)
    assert outcome.ok, outcome.envelope
    [request] = service.requests
    assert request.query == {"dry_run": ["true"]}
    assert {k.lower(): v for k, v in request.headers.items()}["x-request-id"] == "42"
    assert request.json() == {"name": "Rex"}


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "nul\x00", "bell\x07", ["list"]])
async def test_a_header_argument_cannot_smuggle_a_header(
    executor: ToolExecutor, service: ToolService, value: object
) -> None:
    tool = placed_tool(service.url, headers={"trace": "X-Trace"})
    outcome = await run_tool(executor, "analyst", tool, {"name": "Rex", "trace": value})
    assert outcome.error_code == "invalid_arguments"
    assert "'trace' is sent as a header" in outcome.envelope["error"]["message"]
    assert not outcome.executed and service.requests == []


async def test_a_query_credential_is_sent_and_never_echoed_back(
    executor: ToolExecutor, service: ToolService
) -> None:
    auth = ToolAuth(type="query", param="api_key", env="SVC_KEY")
    tool = placed_tool(service.url, auth=auth, method="GET", body="none")
    outcome = await run_tool(executor, "analyst", tool, {"name": "Rex"})
    assert outcome.ok, outcome.envelope
    [request] = service.requests
    assert request.query == {"name": ["Rex"], "api_key": [QUERY_KEY]}
    echoed = str(outcome.envelope)  # the echo holds the raw, percent-encoded query
    assert QUERY_KEY not in echoed and "key%20with%2Fslash" not in echoed
    assert "[redacted]" in echoed


async def test_an_argument_cannot_take_the_credential_parameter(
    executor: ToolExecutor, service: ToolService
) -> None:
    schema = {"type": "object", "properties": {"api_key": {"type": "string"}}}
    tool = http_tool("svc", "read", service.url, path="/items", schema=schema)
    auth = ToolAuth(type="query", param="api_key", env="SVC_KEY")
    tool = tool.model_copy(update={"execution": tool.execution.model_copy(update={"auth": auth})})
    outcome = await run_tool(executor, "analyst", tool, {"api_key": "mine"})
    assert outcome.error_code == "invalid_arguments"
    assert "'api_key' carries the service's credential" in outcome.envelope["error"]["message"]
    assert service.requests == []


async def test_a_body_argument_is_the_whole_body(
    executor: ToolExecutor, service: ToolService
) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "body": {}},
        "required": ["name"],
    }
    tool = http_tool("svc", "put", service.url, method="PUT", path="/items/{name}", schema=schema)
    execution = tool.execution.model_copy(update={"body_arg": "body"})
    tool = tool.model_copy(update={"execution": execution})
    outcome = await run_tool(executor, "analyst", tool, {"name": "a", "body": [1, "two"]})
    assert outcome.ok, outcome.envelope
    [request] = service.requests
    assert (request.raw_path, request.json()) == ("/items/a", [1, "two"])


async def test_an_argument_with_no_place_beside_a_body_argument_is_refused(
    executor: ToolExecutor, service: ToolService
) -> None:
    tool = placed_tool(service.url, body_arg="name")
    outcome = await run_tool(executor, "analyst", tool, {"name": "Rex", "dry_run": True})
    assert outcome.error_code == "invalid_arguments"
    assert "unknown argument(s) for this tool: dry_run" in outcome.envelope["error"]["message"]
    assert service.requests == []
