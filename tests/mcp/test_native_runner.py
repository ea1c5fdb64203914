"""End to end in native mode: the trading-desk example pod compiled by clawc, its real tool
services, the sidecar, and an unchanged OpenAI-SDK tool loop that takes its tools from MCP
``tools/list`` and runs the model's calls through ``tools/call``. Every model request and every
tool call lands in the trader's one audit chain."""

from __future__ import annotations

import asyncio
import importlib.util
import io
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from string import Template
from types import ModuleType
from typing import Any

import openai
import orjson
import pytest
import yaml
from aiohttp import web
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from clawpod.cli.audit import show_command, verify_command
from clawpod.cli.clawc import main as clawc
from tests.support.example_apps import example_pod_copy, serving_asgi
from tests.support.operator import approve_next
from tests.support.sidecar import start_sidecar
from tests.support.upstream import Reply, StubUpstream, openai_completion

EXAMPLE = Path(__file__).resolve().parents[2] / "compose" / "examples" / "trading-desk"
SECRETS = {
    "OPENAI_API_KEY": "sk-e2e-provider-key",
    "TRADING_RO_TOKEN": "trading-read-e2e-secret",
    "TRADING_RW_TOKEN": "trading-write-e2e-secret",
    "NEWS_API_KEY": "news-e2e-secret",
    "RESEARCH_API_TOKEN": "research-e2e-secret",
    "CLAW_OPERATOR_TOKEN": "operator-e2e-secret-9b2d4f6a8c0e1f3a5b7c9d1e3f5a7b9c",
}

if not (EXAMPLE / "pod.yml").is_file():
    pytest.skip("trading-desk example pod not present", allow_module_level=True)


def load_service(name: str) -> ModuleType:
    """The example's service module (its directory name is not an importable package)."""
    module_name = "example_" + name.replace("-", "_")
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, EXAMPLE / name / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def local_pod(tmp: Path, urls: dict[str, str], upstream: StubUpstream) -> Path:
    """The example pod, unchanged except that services and the provider are local."""
    pod = example_pod_copy(tmp)
    pod["x-claw"]["providers"] = {
        "openai": {
            "api": "openai",
            "base-url": upstream.openai_url,
            "key-env": "OPENAI_API_KEY",
            "models": ["gpt-*"],
        }
    }
    for name, url in urls.items():
        pod["services"][name]["x-claw"]["url"] = url
    path = tmp / "pod.yml"
    path.write_text(yaml.safe_dump(pod, sort_keys=False))
    return path


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
    }


def model_calls(*calls: dict[str, Any]) -> Reply:
    body = openai_completion(model="gpt-4o-mini", prompt_tokens=50, completion_tokens=20)
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": list(calls),
    }
    body["choices"][0]["finish_reason"] = "tool_calls"
    return Reply.json(body)


@pytest.fixture
async def desk(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    trading_module = load_service("trading-api")
    trading = trading_module.create_app(SECRETS["TRADING_RO_TOKEN"], SECRETS["TRADING_RW_TOKEN"])
    news = load_service("market-news").create_app(SECRETS["NEWS_API_KEY"])
    research = load_service("research-mcp").create_app(SECRETS["RESEARCH_API_TOKEN"])
    trading_runner, trading_url = await serve(trading)
    news_runner, news_url = await serve(news)
    async with StubUpstream() as upstream, serving_asgi(research) as research_url:
        urls = {"trading-api": trading_url, "market-news": news_url, "research-mcp": research_url}
        pod = local_pod(tmp_path, urls, upstream)
        out = tmp_path / "build"
        assert clawc(["compile", str(pod), "-o", str(out)]) == 0
        sidecar = await start_sidecar(out, tmp_path / "state", env=SECRETS)
        try:
            yield {
                "build": out,
                "state": tmp_path / "state",
                "sidecar": sidecar,
                "upstream": upstream,
                "trading_received": trading[trading_module.RECEIVED],
            }
        finally:
            await sidecar.close()
            await trading_runner.cleanup()
            await news_runner.cleanup()


def agent_env(build: Path, agent: str, sidecar_url: str) -> dict[str, str]:
    """The agent's env file, with the in-pod sidecar address mapped to the test's."""
    env = {}
    for line in (build / "agents" / f"{agent}.env").read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value.replace("http://claw-sidecar:8080", sidecar_url)
    return env


def mcp_transport(build: Path, agent: str, env: dict[str, str], sidecar_url: str) -> Any:
    """The official client configured from the compiler's mcp.json, used as-is."""
    config = orjson.loads((build / "context" / agent / "mcp.json").read_bytes())
    [server] = config["mcpServers"].values()
    headers = {k: Template(v).substitute(env) for k, v in server.get("headers", {}).items()}
    url = server["url"].replace("http://claw-sidecar:8080", sidecar_url)
    return create_mcp_http_client(headers=headers), url


async def run_native_agent(env: dict[str, str], client: Client, question: str) -> str:
    """An ordinary OpenAI-SDK tool loop; tools come from MCP and run through MCP."""
    listing = await client.list_tools()
    tools = [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            },
        }
        for t in listing.tools
    ]
    llm = openai.AsyncOpenAI(
        base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    try:
        for _ in range(8):
            reply = await llm.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=tools
            )
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = await client.call_tool(
                    call.function.name, orjson.loads(call.function.arguments)
                )
                text = "".join(block.text for block in result.content if block.type == "text")
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    finally:
        await llm.close()
    raise AssertionError("the loop did not finish")


async def test_native_agent_completes_a_multi_tool_task_and_the_audit_shows_every_call(
    desk: dict[str, Any],
) -> None:
    upstream: StubUpstream = desk["upstream"]
    upstream.enqueue(
        "openai",
        model_calls(
            tool_call("c1", "trading-api_get_market_context", {}),
            tool_call("c2", "trading-api_get_quote", {"symbol": "NVDA"}),
        ),
        model_calls(
            tool_call(
                "c3", "trading-api_execute_trade", {"symbol": "NVDA", "side": "buy", "quantity": 10}
            )
        ),
        model_calls(tool_call("c4", "trading-api_list_trades", {"limit": 5})),
        Reply.json(
            openai_completion("Bought 10 NVDA at 121.40 (trade T0001).", model="gpt-4o-mini")
        ),
    )
    sidecar_url = desk["sidecar"].url
    env = agent_env(desk["build"], "trader", sidecar_url)
    assert env["OPENAI_BASE_URL"] == sidecar_url + "/v1"
    http, url = mcp_transport(desk["build"], "trader", env, sidecar_url)
    # The pod's confirm rule holds the order until an operator approves it.
    operator = desk["sidecar"].admin_url
    approval = asyncio.ensure_future(approve_next(operator, SECRETS["CLAW_OPERATOR_TOKEN"]))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        answer = await run_native_agent(env, client, "Buy 10 NVDA if buying power allows.")
    assert answer == "Bought 10 NVDA at 121.40 (trade T0001)."
    approved = await approval
    assert (approved["agent"], approved["tool"]) == ("trader", "trading-api.execute_trade")

    # The model saw exactly the MCP tools, passed through without injection.
    model_requests = upstream.requests_to("openai")
    assert len(model_requests) == 4
    offered = [t["function"]["name"] for t in model_requests[0].json["tools"]]
    assert "trading-api_execute_trade" in offered and len(offered) == len(set(offered)) == 7
    assert all(
        r.headers["Authorization"] == f"Bearer {SECRETS['OPENAI_API_KEY']}" for r in model_requests
    )
    results = [m for m in model_requests[2].json["messages"] if m["role"] == "tool"]
    assert orjson.loads(results[-1]["content"])["data"]["status"] == "filled"

    # The real trading service did the work, with the sidecar's credential.
    received = desk["trading_received"]
    assert [(r["method"], r["path"]) for r in received] == [
        ("GET", "/api/v1/market_context/trader"),
        ("GET", "/api/v1/quotes/NVDA"),
        ("POST", "/api/v1/trades"),
        ("GET", "/api/v1/trades"),
    ]
    assert orjson.loads(received[2]["body"]) == {
        "trade": {"symbol": "NVDA", "side": "buy", "quantity": 10}
    }
    assert [r["token"] for r in received] == ["trading"] * 4  # the desk-trader principal's

    # One chain: four model requests, four tool calls and the approval's decision, in order.
    lines = (desk["state"] / "audit" / "trader.jsonl").read_bytes().splitlines()
    everything = [orjson.loads(line) for line in lines]
    decisions = [r for r in everything if r.get("event") == "approval_decided"]
    assert [(d["approval"], d["decision"]) for d in decisions] == [(approved["id"], "approved")]
    records = [r for r in everything if r.get("event") != "approval_decided"]
    routes = [r["route"] for r in records]
    assert routes == [
        "/v1/chat/completions",
        "/mcp",
        "/mcp",
        "/v1/chat/completions",
        "/mcp",
        "/v1/chat/completions",
        "/mcp",
        "/v1/chat/completions",
    ]
    assert all(r["mode"] == "native" for r in records)
    calls = [r["tool_trace"][0]["calls"][0] for r in records if r["route"] == "/mcp"]
    assert [c["name"] for c in calls] == [
        "trading-api.get_market_context",
        "trading-api.get_quote",
        "trading-api.execute_trade",
        "trading-api.list_trades",
    ]
    assert all(c["error_code"] is None and c["status"] in (200, 201) for c in calls)
    model_records = [r for r in records if r["route"] == "/v1/chat/completions"]
    assert all(
        r["model"] == "gpt-4o-mini" and r["usage"]["input_tokens"] > 0 for r in model_records
    )
    text = b"\n".join(lines).decode()
    for secret in [*SECRETS.values(), env["CLAW_AGENT_TOKEN"]]:
        assert secret not in text
    assert verify_command(desk["state"], io.StringIO()) == 0
    summary = io.StringIO()
    show_command(desk["state"], summary, agent="trader")
    assert summary.getvalue().count("trading-api.") == 4


async def test_mediated_agents_are_not_served_over_mcp(desk: dict[str, Any]) -> None:
    sidecar_url = desk["sidecar"].url
    env = agent_env(desk["build"], "analyst", sidecar_url)
    http, url = mcp_transport(desk["build"], "analyst", env, sidecar_url)
    with pytest.raises(BaseException) as raised:  # the client wraps it in task-group errors
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            await client.list_tools()
    assert "mediated" in repr(raised.value)
    assert desk["trading_received"] == []


def streamed(*chunks: dict[str, Any]) -> Reply:
    """Chat Completions chunks as an SSE stream (one write per event), ending with [DONE]."""
    events = [b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks]
    return Reply.sse([*events, b"data: [DONE]\n\n"])


def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict | None = None) -> dict:
    return {
        "id": "chatcmpl-stream",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        "usage": usage,
    }


async def test_streaming_native_loop_is_passed_through_and_audited(desk: dict[str, Any]) -> None:
    upstream: StubUpstream = desk["upstream"]
    arguments = orjson.dumps({"symbol": "MSFT"}).decode()
    upstream.enqueue(
        "openai",
        streamed(
            chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "s1",
                            "type": "function",
                            "function": {"name": "trading-api_get_quote", "arguments": ""},
                        }
                    ],
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[:8]}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[8:]}}]}),
            chunk(
                {},
                finish="tool_calls",
                usage={"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39},
            ),
        ),
        streamed(
            chunk({"role": "assistant", "content": "MSFT is "}),
            chunk(
                {"content": "411.20."},
                finish="stop",
                usage={"prompt_tokens": 60, "completion_tokens": 4, "total_tokens": 64},
            ),
        ),
    )
    sidecar_url = desk["sidecar"].url
    env = agent_env(desk["build"], "trader", sidecar_url)
    http, url = mcp_transport(desk["build"], "trader", env, sidecar_url)
    llm = openai.AsyncOpenAI(
        base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0
    )
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        tools = [
            {"type": "function", "function": {"name": t.name, "parameters": t.input_schema}}
            for t in (await client.list_tools()).tools
        ]
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Price of MSFT?"}]
        answer = ""
        for _ in range(3):
            calls: dict[int, dict[str, str]] = {}
            text = ""
            stream = await llm.chat.completions.create(
                model="gpt-4o-mini",
                messages=messages,
                tools=tools,
                stream=True,
                stream_options={"include_usage": True},
            )
            async for event in stream:
                for choice in event.choices:
                    text += choice.delta.content or ""
                    for delta in choice.delta.tool_calls or []:
                        call = calls.setdefault(
                            delta.index, {"id": "", "name": "", "arguments": ""}
                        )
                        call["id"] += delta.id or ""
                        call["name"] += (delta.function.name or "") if delta.function else ""
                        call["arguments"] += (
                            (delta.function.arguments or "") if delta.function else ""
                        )
            if not calls:
                answer = text
                break
            messages.append(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]},
                        }
                        for c in calls.values()
                    ],
                }
            )
            for c in calls.values():
                result = await client.call_tool(c["name"], orjson.loads(c["arguments"]))
                messages.append(
                    {"role": "tool", "tool_call_id": c["id"], "content": result.content[0].text}
                )
    await llm.close()
    assert answer == "MSFT is 411.20."
    records = [
        orjson.loads(line)
        for line in (desk["state"] / "audit" / "trader.jsonl").read_bytes().splitlines()
    ]
    assert [(r["route"], r["stream"]) for r in records] == [
        ("/v1/chat/completions", True),
        ("/mcp", True),
        ("/v1/chat/completions", True),
    ]
    assert records[0]["usage"]["input_tokens"] == 30 and records[2]["usage"]["output_tokens"] == 4
    call = records[1]["tool_trace"][0]["calls"][0]
    assert (call["name"], call["arguments"], call["status"]) == (
        "trading-api.get_quote",
        {"symbol": "MSFT"},
        200,
    )
    assert verify_command(desk["state"], io.StringIO()) == 0
