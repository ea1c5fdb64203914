"""Argument values can never change the method, host, path or headers of a tool request.

Property-based: hypothesis draws placeholder and query values (``/``, ``..``, ``%2F``, ``?``,
``#``, CR/LF, NUL, unicode, 10 kB strings, and anything else) and the real executor sends them
to a real service that records the request exactly as it arrived on the wire. End to end: the
same values through MCP and through a mediated model call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import aiohttp
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clawpod.sidecar.execution.executor import ToolExecutor
from clawpod.sidecar.manifest import ManagedTool, ToolAuth
from clawpod.sidecar.model.conversation import ToolOutcome
from tests.reliability.harness import BackgroundLoop, Pod, start_pod, stop_pod
from tests.reliability.wire import ask, text, tool_call
from tests.support import secret_sweep
from tests.support.builds import http_tool
from tests.support.services import RecordedRequest, ToolService
from tests.support.tool_calls import run_tool
from tests.support.upstream import Reply

CREDENTIAL = "argument-safety-credential-91b2"
SPECIALS = [
    "/",
    "..",
    "../..",
    "../../admin",
    "a/../../b",
    "%2F",
    "%2e%2e",
    "..%2F..%2Fetc",
    "?",
    "?admin=1",
    "#frag",
    "a?b#c",
    "\r\nX-Injected: yes",
    "\r\n\r\nGET /evil HTTP/1.1",
    "\n",
    "\x00",
    "a\x00b",
    "é€😀",
    "\u202e\ufeff",
    "http://evil.example/",
    "//evil.example/x",
    "@evil.example",
    " ",
    "+&=;",
    "x" * 10_240,
    "é" * 5_000,
]
VALUES = st.one_of(
    st.sampled_from(SPECIALS),
    st.text(alphabet=st.sampled_from(list("/.%2Fe?#\r\n\x00 &=+@:;é😀")), min_size=1, max_size=24),
    st.text(min_size=1, max_size=64),
)
PATH_SCHEMA = {
    "type": "object",
    "properties": {"item": {"type": "string"}, "q": {"type": "string"}},
    "required": ["item"],
}
ALLOWED_HEADERS = {
    "host",
    "accept",
    "accept-encoding",
    "user-agent",
    "x-api-key",
    "content-type",
    "content-length",
}


class ExecutorRig:
    def __init__(self) -> None:
        self.background = BackgroundLoop()
        self.service: ToolService = self.background.run(ToolService().start())
        self.executor = ToolExecutor(env={"ARG_SAFETY": CREDENTIAL})
        self.background.run(self.executor.start())
        auth = ToolAuth(type="header", env="ARG_SAFETY", header="X-Api-Key")
        self.get = http_tool(
            "svc",
            "get",
            self.service.url,
            path="/items/{item}/detail",
            schema=PATH_SCHEMA,
            auth=auth,
        )
        self.post = http_tool(
            "svc",
            "post",
            self.service.url,
            method="POST",
            path="/items/{item}",
            schema=PATH_SCHEMA,
            body_key="payload",
            auth=auth,
        )

    def call(self, tool: ManagedTool, arguments: dict[str, Any]) -> tuple[ToolOutcome, list]:
        before = len(self.service.requests)
        outcome = self.background.run(
            run_tool(
                self.executor, "agent-1", tool, arguments, timeout_s=10, max_result_bytes=1 << 20
            )
        )
        secret_sweep.collect("executor envelope", outcome.envelope_json())
        return outcome, self.service.requests[before:]

    def close(self) -> None:
        self.background.run(self.executor.close())
        self.background.run(self.service.close())
        self.background.close()


@pytest.fixture(scope="module")
def rig() -> Iterator[ExecutorRig]:
    secret_sweep.register(CREDENTIAL)
    running = ExecutorRig()
    yield running
    running.close()


def check_request(rig: ExecutorRig, request: RecordedRequest, method: str, prefix: str) -> str:
    """The request kept its method, host, path shape and headers; returns the path segment."""
    assert request.method == method
    raw_path, _, _ = request.raw_path.partition("?")
    assert "#" not in request.raw_path
    assert raw_path.startswith(prefix)
    headers = {name.lower(): value for name, value in request.headers.items()}
    assert set(headers) <= ALLOWED_HEADERS, headers
    assert headers["host"] == f"127.0.0.1:{rig.service.port}"
    assert headers["x-api-key"] == CREDENTIAL
    return raw_path[len(prefix) :]


def refused_or_rejected(outcome: ToolOutcome, requests: list, value: str) -> bool:
    """Values that cannot be a path segment are refused before sending; values too long for
    the service's request line are rejected by the service itself (never reaching a handler)."""
    if not requests and outcome.error_code == "invalid_arguments":
        return value in (".", "..")
    return not requests and outcome.status in (400, 414, 431)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(item=VALUES, query=VALUES)
def test_get_values_stay_in_their_segment_and_query(
    rig: ExecutorRig, item: str, query: str
) -> None:
    outcome, requests = rig.call(rig.get, {"item": item, "q": query})
    if refused_or_rejected(outcome, requests, item):
        return
    assert len(requests) == 1, outcome.envelope
    request = requests[0]
    segment = check_request(rig, request, "GET", "/items/")
    assert segment.endswith("/detail")
    segment = segment[: -len("/detail")]
    assert "/" not in segment and "?" not in segment
    assert unquote(segment, errors="strict") == item
    assert request.query == {"q": [query]}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(item=VALUES, query=VALUES)
def test_post_values_stay_in_their_segment_and_body(
    rig: ExecutorRig, item: str, query: str
) -> None:
    outcome, requests = rig.call(rig.post, {"item": item, "q": query})
    if refused_or_rejected(outcome, requests, item):
        return
    assert len(requests) == 1, outcome.envelope
    request = requests[0]
    segment = check_request(rig, request, "POST", "/items/")
    assert "/" not in segment
    assert unquote(segment, errors="strict") == item
    assert request.query == {}
    assert orjson.loads(request.body) == {"payload": {"q": query}}


@pytest.mark.parametrize("value", [".", ".."])
def test_dot_segments_are_refused_unsent(rig: ExecutorRig, value: str) -> None:
    outcome, requests = rig.call(rig.get, {"item": value})
    assert requests == []
    assert outcome.error_code == "invalid_arguments"


def test_claw_id_cannot_be_supplied_by_arguments(rig: ExecutorRig) -> None:
    tool = http_tool("svc", "mine", rig.service.url, path="/agents/{claw_id}/items")
    outcome, requests = rig.call(tool, {"claw_id": "../other-agent"})
    assert outcome.error_code == "invalid_arguments"  # refused, not silently replaced
    assert requests == []
    outcome, requests = rig.call(tool, {})
    assert outcome.ok, outcome.envelope
    assert requests[0].raw_path == "/agents/agent-1/items"


# --- end to end: JSON text from the wire, through MCP and through the model -----------------------

WIRE_VALUES = ["../../admin", "a%2Fb?c#d", "\r\nX-Injected: yes", "\x00", "é€😀", "x" * 10_240]


@pytest.fixture
async def pod(tmp_path: Any) -> Any:
    running = await start_pod(tmp_path)
    yield running
    await stop_pod(running)


async def test_values_from_mcp_json_text_keep_the_request_shape(pod: Pod) -> None:
    """Raw JSON-RPC text (escapes decoded by the sidecar, lone surrogates included)."""
    headers = {
        "Authorization": f"Bearer {pod.tokens['native']}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    values = [*WIRE_VALUES, "\ud800"]
    async with aiohttp.ClientSession(headers=headers) as session:
        initialize = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        async with session.post(pod.url + "/mcp", json=initialize) as response:
            assert response.status == 200
            session_id = response.headers.get("Mcp-Session-Id")
        if session_id:
            session.headers["Mcp-Session-Id"] = session_id
        for number, value in enumerate(values, start=1):
            if value == "\ud800":
                arguments = b'{"symbol": "\\ud800"}'
            else:
                arguments = orjson.dumps({"symbol": value})
            body = (
                b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": '
                b'{"name": "desk_quote", "arguments": %s}}' % (number, arguments)
            )
            async with session.post(pod.url + "/mcp", data=body) as response:
                raw = await response.read()
                secret_sweep.collect("mcp raw", raw)
                assert response.status in (200, 400), raw
    # The 10 kB value makes a request line the service's HTTP parser refuses by itself.
    assert len(pod.service.requests) == len(WIRE_VALUES) - 1
    for request in pod.service.requests:
        assert request.method == "GET"
        assert request.raw_path.startswith("/quotes/")
        assert "/" not in request.raw_path[len("/quotes/") :].partition("?")[0]
        assert "x-injected" not in {h.lower() for h in request.headers}
    assert {unquote(r.raw_path[len("/quotes/") :]) for r in pod.service.requests} <= set(values)


async def test_values_from_a_model_keep_the_request_shape(pod: Pod) -> None:
    for number, value in enumerate(WIRE_VALUES):
        pod.upstream.enqueue(
            "openai",
            Reply.json(tool_call("openai", "desk_quote", {"symbol": value})),
            Reply.json(text("openai", f"done {number}")),
        )
        seen = await ask(pod, "openai", "analyst", f"quote #{number}", stream=False)
        assert seen.answer == f"done {number}"
    segments = [unquote(r.raw_path[len("/quotes/") :]) for r in pod.service.requests]
    assert segments == [v for v in WIRE_VALUES if len(v) < 8000]  # 10 kB: refused by the service
    calls = [c for r in pod.audit("analyst") for t in r["tool_trace"] for c in t["calls"]]
    assert [c["error_code"] for c in calls] == [None] * 5 + ["http_400"]
    for request in pod.service.requests:
        assert request.method == "GET"
        assert "x-injected" not in {h.lower() for h in request.headers}
