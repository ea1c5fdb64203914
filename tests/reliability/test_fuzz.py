"""Property-based fuzzing of everything a client sends the sidecar: /v1/chat/completions,
/v1/messages and /mcp bodies and headers. Whatever arrives, the answer is never a 500 or a
traceback: a clear 4xx in the caller's protocol, or a real answer; nothing is logged as an
unhandled error. Every body-reading route answers an oversized body with 413.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reliability.harness import BackgroundLoop, Pod, start_pod, stop_pod
from tests.reliability.wire import text
from tests.support import secret_sweep
from tests.support.upstream import Reply

MAX_BODY = 64 * 1024
# CI runs 150 examples per property; CLAW_FUZZ_EXAMPLES raises it for a deeper run.
FUZZ = settings(
    max_examples=int(os.environ.get("CLAW_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ROUTES = ("/v1/chat/completions", "/v1/messages", "/mcp")
UPSTREAM_STATUSES = (502, 504)  # honest answers about the upstream, never our own crash


class ErrorLogs(logging.Handler):
    """Counts error records of the sidecar's loggers (unhandled exceptions are logged so)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("clawpod.sidecar"):
            self.records.append(f"{record.name}: {record.getMessage()}")


@dataclass
class Answer:
    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


class FuzzRig:
    def __init__(self, root: Path) -> None:
        self.background = BackgroundLoop()
        self.pod: Pod = self.background.run(start_pod(root, max_body_bytes=MAX_BODY))
        self.pod.upstream.always("openai", Reply.json(text("openai", "fine")))
        self.pod.upstream.always("anthropic", Reply.json(text("anthropic", "fine")))
        self.session: aiohttp.ClientSession = self.background.run(_session())
        self.errors = ErrorLogs()
        logging.getLogger().addHandler(self.errors)
        self.sent = 0

    def token(self, agent: str) -> str:
        return self.pod.tokens[agent]

    def send(
        self, path: str, body: bytes | None, headers: dict[str, str], method: str = "POST"
    ) -> Answer:
        self.sent += 1
        answer = self.background.run(self._send(method, path, body, headers))
        secret_sweep.collect(f"fuzz {path}", answer.body)
        assert answer.status != 500, answer
        assert answer.status < 500 or answer.status in UPSTREAM_STATUSES, answer
        assert b"Traceback" not in answer.body
        assert not self.errors.records, self.errors.records
        return answer

    async def _send(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> Answer:
        url = self.pod.url + path
        async with self.session.request(method, url, data=body, headers=headers) as response:
            data = await response.read()
            return Answer(response.status, response.content_type, data)

    def close(self) -> None:
        logging.getLogger().removeHandler(self.errors)
        self.background.run(self.session.close())
        self.background.run(stop_pod(self.pod))
        self.background.close()


async def _session() -> aiohttp.ClientSession:
    # skip_auto_headers: let the fuzzed headers decide the content type
    return aiohttp.ClientSession(skip_auto_headers=["Content-Type"])


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzRig]:
    running = FuzzRig(tmp_path_factory.mktemp("fuzz"))
    yield running
    running.close()


# --- strategies -----------------------------------------------------------------------------

SHORT_TEXT = st.text(max_size=24)
JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | SHORT_TEXT
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(SHORT_TEXT, inner, max_size=4),
    max_leaves=16,
)
TOOL_NAMES = st.sampled_from(["desk_quote", "desk.quote", "desk_huge", "runner_tool", ""]) | JSON
MODELS = (
    st.sampled_from(
        ["gpt-4o", "openai/gpt-4o", "claude-haiku-4-5", "anthropic/claude-x", "", "nope/x", "o1"]
    )
    | JSON
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually the well-formed shape, sometimes any JSON at all."""
    return strategy | JSON


OPENAI_TOOL_CALL = st.fixed_dictionaries(
    {
        "id": maybe(SHORT_TEXT),
        "type": maybe(st.just("function")),
        "function": maybe(
            st.fixed_dictionaries(
                {
                    "name": TOOL_NAMES,
                    "arguments": maybe(st.sampled_from(['{"symbol": "A"}', "{", ""])),
                }
            )
        ),
    }
)
OPENAI_MESSAGE = st.fixed_dictionaries(
    {
        "role": maybe(
            st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"])
        )
    },
    optional={
        "content": maybe(
            SHORT_TEXT
            | st.lists(
                st.fixed_dictionaries({"type": maybe(st.just("text")), "text": maybe(SHORT_TEXT)}),
                max_size=2,
            )
        ),
        "tool_calls": maybe(st.lists(OPENAI_TOOL_CALL, max_size=3)),
        "tool_call_id": maybe(SHORT_TEXT),
        "name": maybe(SHORT_TEXT),
        "function_call": JSON,
    },
)
OPENAI_TOOL = st.fixed_dictionaries(
    {
        "type": maybe(st.just("function")),
        "function": maybe(
            st.fixed_dictionaries(
                {"name": TOOL_NAMES},
                optional={"description": maybe(SHORT_TEXT), "parameters": JSON},
            )
        ),
    }
)
OPENAI_BODY = st.fixed_dictionaries(
    {"model": MODELS, "messages": maybe(st.lists(OPENAI_MESSAGE, max_size=5))},
    optional={
        "stream": maybe(st.booleans()),
        "stream_options": JSON,
        "tools": maybe(st.lists(OPENAI_TOOL, max_size=3)),
        "tool_choice": maybe(
            st.sampled_from(["auto", "none", "required"])
            | st.fixed_dictionaries(
                {
                    "type": st.just("function"),
                    "function": st.fixed_dictionaries({"name": TOOL_NAMES}),
                }
            )
        ),
        "functions": maybe(
            st.lists(st.fixed_dictionaries({"name": TOOL_NAMES, "parameters": JSON}), max_size=2)
        ),
        "function_call": maybe(
            st.sampled_from(["auto", "none"]) | st.fixed_dictionaries({"name": TOOL_NAMES})
        ),
        "parallel_tool_calls": JSON,
        "max_tokens": JSON,
    },
)
ANTHROPIC_BLOCK = st.fixed_dictionaries(
    {
        "type": maybe(
            st.sampled_from(
                [
                    "text",
                    "tool_use",
                    "tool_result",
                    "thinking",
                    "image",
                    "server_tool_use",
                    "new_kind",
                ]
            )
        )
    },
    optional={
        "text": maybe(SHORT_TEXT),
        "id": maybe(SHORT_TEXT),
        "name": TOOL_NAMES,
        "input": JSON,
        "tool_use_id": maybe(SHORT_TEXT),
        "content": JSON,
        "thinking": maybe(SHORT_TEXT),
        "signature": maybe(SHORT_TEXT),
        "is_error": JSON,
    },
)
ANTHROPIC_MESSAGE = st.fixed_dictionaries(
    {
        "role": maybe(st.sampled_from(["user", "assistant"])),
        "content": maybe(SHORT_TEXT | st.lists(ANTHROPIC_BLOCK, max_size=3)),
    }
)
ANTHROPIC_BODY = st.fixed_dictionaries(
    {"model": MODELS, "messages": maybe(st.lists(ANTHROPIC_MESSAGE, max_size=5))},
    optional={
        "max_tokens": maybe(st.integers(1, 100)),
        "system": maybe(SHORT_TEXT | st.lists(ANTHROPIC_BLOCK, max_size=2)),
        "stream": maybe(st.booleans()),
        "tools": maybe(
            st.lists(
                st.fixed_dictionaries(
                    {"name": TOOL_NAMES},
                    optional={"description": SHORT_TEXT, "input_schema": JSON, "type": SHORT_TEXT},
                ),
                max_size=3,
            )
        ),
        "tool_choice": maybe(
            st.fixed_dictionaries(
                {"type": maybe(st.sampled_from(["auto", "any", "tool", "none"]))},
                optional={"name": TOOL_NAMES, "disable_parallel_tool_use": JSON},
            )
        ),
        "thinking": JSON,
        "metadata": JSON,
    },
)
HEADER_TEXT = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
AGENTS = st.sampled_from(["plain", "analyst", "native"])


def auth_headers(rig: FuzzRig, agent: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {rig.token(agent)}", "Content-Type": "application/json"}


def check_openai_shape(answer: Answer) -> None:
    if answer.status >= 400:
        error = answer.json()["error"]
        assert isinstance(error["message"], str) and error["message"]
        assert "code" in error and "type" in error


def check_anthropic_shape(answer: Answer) -> None:
    if answer.status >= 400:
        body = answer.json()
        assert body["type"] == "error"
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]


# --- LLM routes -------------------------------------------------------------------------------


@FUZZ
@given(body=OPENAI_BODY | JSON, agent=AGENTS)
def test_chat_completions_bodies(rig: FuzzRig, body: Any, agent: str) -> None:
    answer = rig.send("/v1/chat/completions", json.dumps(body).encode(), auth_headers(rig, agent))
    check_openai_shape(answer)


@FUZZ
@given(body=ANTHROPIC_BODY | JSON, agent=AGENTS)
def test_messages_bodies(rig: FuzzRig, body: Any, agent: str) -> None:
    headers = {**auth_headers(rig, agent), "anthropic-version": "2023-06-01"}
    answer = rig.send("/v1/messages", json.dumps(body).encode(), headers)
    check_anthropic_shape(answer)


@FUZZ
@given(route=st.sampled_from(ROUTES), raw=st.binary(max_size=512), content_type=HEADER_TEXT)
def test_raw_bytes_on_every_route(rig: FuzzRig, route: str, raw: bytes, content_type: str) -> None:
    headers = {"Authorization": f"Bearer {rig.token('native')}", "Content-Type": content_type}
    answer = rig.send(route, raw, headers)
    if route == "/v1/chat/completions":
        check_openai_shape(answer)
    elif route == "/v1/messages":
        check_anthropic_shape(answer)


TOKEN_HEADERS = st.sampled_from(["Authorization", "x-api-key", "X-API-KEY", "authorization"])


@FUZZ
@given(
    route=st.sampled_from(ROUTES),
    header=TOKEN_HEADERS,
    value=HEADER_TEXT | st.sampled_from(["Bearer", "Bearer ", "Basic abc", "bearer  x y"]),
    extra=st.dictionaries(
        st.sampled_from(
            [
                "anthropic-version",
                "anthropic-beta",
                "openai-organization",
                "idempotency-key",
                "Accept",
                "Mcp-Session-Id",
                "MCP-Protocol-Version",
                "Content-Encoding",
                "x-api-key",
            ]
        ),
        HEADER_TEXT,
        max_size=3,
    ),
)
def test_headers(rig: FuzzRig, route: str, header: str, value: str, extra: dict[str, str]) -> None:
    headers = {header: value, "Content-Type": "application/json", **extra}
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    answer = rig.send(route, orjson.dumps(body), headers)
    if answer.status in (401, 403) and route != "/mcp":
        shape = check_openai_shape if "chat" in route else check_anthropic_shape
        shape(answer)


@FUZZ
@given(agent=AGENTS, value=HEADER_TEXT, route=st.sampled_from(ROUTES))
def test_real_tokens_with_mangled_headers(rig: FuzzRig, agent: str, value: str, route: str) -> None:
    token = rig.token(agent)
    headers = {"Authorization": f"Bearer {token}{value}", "x-api-key": value + token}
    answer = rig.send(route, b"{}", {**headers, "Content-Type": "application/json"})
    assert answer.status != 200 or value.strip() == ""


# --- MCP ------------------------------------------------------------------------------------

MCP_METHODS = (
    st.sampled_from(
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call",
            "ping",
            "resources/list",
            "prompts/get",
            "",
            "tools/call/x",
        ]
    )
    | JSON
)
MCP_MESSAGE = st.fixed_dictionaries(
    {"jsonrpc": maybe(st.just("2.0")), "method": MCP_METHODS},
    optional={
        "id": JSON,
        "params": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": TOOL_NAMES,
                    "arguments": JSON,
                    "protocolVersion": maybe(st.sampled_from(["2025-06-18", "2025-03-26", "1999"])),
                    "capabilities": JSON,
                    "clientInfo": JSON,
                    "cursor": JSON,
                },
            )
        ),
    },
)


def mcp_session(rig: FuzzRig, agent: str) -> str | None:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"},
        },
    }
    return rig.background.run(_session_id(rig, agent, message))


async def _session_id(rig: FuzzRig, agent: str, message: dict) -> str | None:
    headers = {**auth_headers(rig, agent), "Accept": "application/json, text/event-stream"}
    url = rig.pod.url + "/mcp"
    async with rig.session.post(url, data=orjson.dumps(message), headers=headers) as response:
        await response.read()
        assert response.status in (200, 403), response.status  # mediated agents: no MCP
        return response.headers.get("Mcp-Session-Id")


@FUZZ
@given(
    messages=st.lists(MCP_MESSAGE, min_size=1, max_size=3),
    batch=st.booleans(),
    with_session=st.booleans(),
    accept=st.sampled_from(
        ["application/json, text/event-stream", "application/json", "text/event-stream", "*/*", ""]
    ),
    agent=AGENTS,
    method=st.sampled_from(["POST", "POST", "GET", "DELETE"]),
)
def test_mcp_bodies(
    rig: FuzzRig,
    messages: list,
    batch: bool,
    with_session: bool,
    accept: str,
    agent: str,
    method: str,
) -> None:
    headers = {**auth_headers(rig, agent), "Accept": accept}
    if with_session:
        session_id = mcp_session(rig, agent)
        if session_id:
            headers["Mcp-Session-Id"] = session_id
    body = json.dumps(messages if batch else messages[0]).encode()
    answer = rig.send("/mcp", body, headers, method=method)
    if answer.status >= 400 and answer.content_type == "application/json":
        error = answer.json()["error"]
        assert isinstance(error["code"], int) and error["message"]


# --- body limits ----------------------------------------------------------------------------


async def _chunks(size: int) -> Any:
    piece = b" " * 8192
    for _ in range(size // len(piece) + 1):
        yield piece


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_oversized_bodies_get_413(rig: FuzzRig, route: str, framing: str) -> None:
    agent = "native" if route == "/mcp" else "plain"
    headers = auth_headers(rig, agent)
    headers["Accept"] = "application/json, text/event-stream"
    size = MAX_BODY * 4
    body = (b"[" + b" " * size + b"]") if framing == "content-length" else _chunks(size)
    answer = rig.send(route, body, headers)  # type: ignore[arg-type]
    assert answer.status == 413, answer
    if route == "/mcp":
        assert answer.json()["error"]["message"]
    elif route == "/v1/messages":
        check_anthropic_shape(answer)
    else:
        check_openai_shape(answer)


def test_every_fuzz_property_reached_the_sidecar(rig: FuzzRig) -> None:
    """Not vacuous: the properties above sent their examples through the real sidecar."""
    assert rig.sent > 0
