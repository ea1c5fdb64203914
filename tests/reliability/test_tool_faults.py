"""Tool service fault matrix: every service fault x every client (OpenAI and Anthropic SDKs,
plain and streaming, mediated; the official MCP client, native) is one test.

In every cell the model (or the MCP client) gets an honest envelope, the client gets the
model's final answer, nothing leaks, a redirect's target is never contacted, and every call
that reached the service is in the audit.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.reliability.harness import Pod, assert_no_leaks, snapshot, start_pod, stop_pod
from tests.reliability.wire import Api, ask, text, tool_call
from tests.support import secret_sweep
from tests.support.upstream import Reply

pytestmark = pytest.mark.asyncio(loop_scope="module")
_answers = itertools.count()


@dataclass(frozen=True)
class ToolFault:
    tool: str  # presented name
    hasty: bool  # use the agent with the 400 ms per-tool timeout
    code: str | None  # error code in the envelope; None: ok
    reaches_service: bool
    truncated_from: int | None = None


FAULTS = {
    "down": ToolFault("desk_down", False, "unreachable", False),
    "slower_than_timeout": ToolFault("desk_slow", True, "timeout", True),
    "http_500": ToolFault("desk_broken", False, "http_500", True),
    "non_json": ToolFault("desk_garbage", False, "invalid_response", True),
    "50_MB_body": ToolFault("desk_huge", False, None, True, truncated_from=50_000_000),
    "redirect_elsewhere": ToolFault("desk_redirect", False, "http_302", True),
    "trickling_bytes": ToolFault("desk_trickle", True, "timeout", True),
}
CLIENTS = ("openai-json", "openai-stream", "anthropic-json", "anthropic-stream", "mcp-native")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pod(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pod]:
    running = await start_pod(tmp_path_factory.mktemp("tool-faults"))
    try:
        for api in ("openai", "anthropic"):  # warm pools and the audit writer
            running.upstream.enqueue(
                api,
                Reply.json(tool_call(api, "desk_quote", {"symbol": "WARM"})),
                Reply.json(text(api, "warm")),
            )
            assert (await ask(running, api, "analyst", "warm", stream=False)).answer == "warm"
        await assert_no_leaks(running, snapshot(running).tasks)
        yield running
    finally:
        await stop_pod(running)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("fault_name", list(FAULTS))
async def test_tool_service_fault(pod: Pod, fault_name: str, client: str) -> None:
    fault = FAULTS[fault_name]
    native = client == "mcp-native"
    agent = ("native" if native else "analyst") + ("-hasty" if fault.hasty else "")
    agent = agent.replace("analyst-hasty", "hasty")
    baseline = snapshot(pod).tasks
    audit_before = len(pod.audit(agent))
    reached_before = len(pod.service.requests)

    if native:
        envelope = await call_over_mcp(pod, agent, fault.tool)
    else:
        envelope = await call_mediated(pod, client, agent, fault.tool)

    assert envelope.get("error", {}).get("code") == fault.code, envelope
    assert envelope["ok"] is (fault.code is None)
    if fault.truncated_from is not None:
        assert envelope["truncated"] is True
        assert envelope["original_bytes"] == fault.truncated_from
    assert pod.elsewhere.requests == [], "a redirect was followed"
    await assert_no_leaks(pod, baseline)

    reached = pod.service.requests[reached_before:]
    assert len(reached) == (1 if fault.reaches_service else 0)
    records = await pod.wait_for_audit(agent, audit_before + 1)
    calls = [
        call
        for record in records[audit_before:]
        for round_ in record.get("tool_trace") or []
        for call in round_["calls"]
    ]
    assert [c["presented"] for c in calls] == [fault.tool]
    assert calls[0]["error_code"] == fault.code
    assert calls[0]["executed"] is fault.reaches_service
    assert (await pod.get("/healthz"))[0] == 200


async def call_mediated(pod: Pod, client: str, agent: str, tool: str) -> dict[str, Any]:
    """The model calls ``tool`` once, then answers; returns the envelope the model was given."""
    api: Api = "openai" if client.startswith("openai") else "anthropic"
    answer = f"answered {next(_answers)}"
    sent_before = len(pod.upstream.requests_to(api))
    pod.upstream.enqueue(api, Reply.json(tool_call(api, tool, {})), Reply.json(text(api, answer)))
    seen = await ask(pod, api, agent, f"use {tool} ({answer})", stream=client.endswith("stream"))
    assert seen.answer == answer, seen
    second = pod.upstream.requests_to(api)[sent_before + 1].json
    return result_envelope(api, second)


def result_envelope(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    """The tool result the sidecar put into the model's next request."""
    last = body["messages"][-1]
    if api == "openai":
        assert last["role"] == "tool"
        return orjson.loads(last["content"])
    (block,) = [b for b in last["content"] if b["type"] == "tool_result"]
    content = block["content"]
    raw = content if isinstance(content, str) else content[0]["text"]
    return orjson.loads(raw)


async def call_over_mcp(pod: Pod, agent: str, tool: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {pod.tokens[agent]}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(pod.url + "/mcp", http_client=http)) as client,
    ):
        result = await client.call_tool(tool, {})
    secret_sweep.collect(f"mcp {tool}", orjson.dumps(result.model_dump(mode="json")))
    assert result.is_error is (result.structured_content["ok"] is False)
    return result.structured_content
