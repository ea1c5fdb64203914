"""A pod for fault injection: a stub upstream that can refuse connections and stall, tool
services with hooks, an in-process sidecar, and leak accounting (tasks and connections)."""

from __future__ import annotations

import asyncio
import inspect
import socket
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import anthropic
import openai
import orjson
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from clawpod.sidecar.manifest import ManagedTool, ToolAuth, ToolPolicy
from tests.support import secret_sweep
from tests.support.builds import AgentSpec, http_tool, providers_for, write_build
from tests.support.services import RecordedRequest, ToolService
from tests.support.sidecar import TEST_PROVIDER_KEYS, RunningSidecar, start_sidecar
from tests.support.upstream import Received, Reply, StubUpstream

T = TypeVar("T")
SERVICE_TOKEN = "svc-reliability-credential-7f3a9c"
UPSTREAM_TIMEOUT_MS = 500
ENV = {
    **TEST_PROVIDER_KEYS,
    "SVC_TOKEN": SERVICE_TOKEN,
    "CLAW_SSE_KEEPALIVE_MS": "100",
}
QUOTE_SCHEMA = {
    "type": "object",
    "properties": {"symbol": {"type": "string", "minLength": 1}},
    "required": ["symbol"],
}


class Stall(Reply):
    """Take the request, send nothing until the pod's ``release`` event, then drop it."""


class FaultUpstream(StubUpstream):
    """The shared stub upstream plus connection refusal (stop listening, keep the port) and
    stalls that end when the test says so (so no stub handler outlives a cell)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.port = 0

    async def start(self) -> FaultUpstream:
        await super().start()
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    @property
    def runner(self) -> web.AppRunner:
        assert self._runner is not None
        return self._runner

    async def refuse(self) -> None:
        """Stop listening and close every open connection: new connects are refused."""
        for site in list(self.runner.sites):
            await site.stop()
        for handler in self.runner.server.connections:
            handler.force_close()
            if handler.transport is not None:
                handler.transport.close()

    async def resume(self) -> None:
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    def open_connections(self) -> int:
        return len(self.runner.server.connections)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        queue = self._queues.get(request.path)
        if queue and isinstance(queue[0], Stall):
            queue.popleft()
            body = await request.read()
            headers = CIMultiDictProxy(CIMultiDict(request.headers))
            self.received.append(Received(request.method, request.path, headers, body))
            await self.release.wait()
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=204)
        return await super()._handle(request)


Hook = Callable[[web.Request], Awaitable[None]]


class FaultService(ToolService):
    """A tool service that can run a hook before answering and trickle a body byte by byte."""

    def __init__(self) -> None:
        super().__init__()
        self.before: Hook | None = None
        self.trickle_bytes = 60
        self.trickle_interval_s = 0.05

    def open_connections(self) -> int:
        assert self._runner is not None
        return len(self._runner.server.connections)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.before is not None:
            hook, self.before = self.before, None
            await hook(request)
        if request.path == "/trickle":
            return await self._trickle(request)
        return await super()._handle(request)

    async def _trickle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(
            RecordedRequest(request.method, request.raw_path, request.path, {}, {}, body)
        )
        response = web.StreamResponse()
        response.content_type = "application/json"
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await response.write(b'"')
            for _ in range(self.trickle_bytes):
                await asyncio.sleep(self.trickle_interval_s)
                await response.write(b"x")
            await response.write(b'"')
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the sidecar gave up: expected
        self.completed += 1
        return response


def closed_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fault_tools(service_url: str, down_url: str) -> list[ManagedTool]:
    auth = ToolAuth(type="bearer", env="SVC_TOKEN")
    read_only = {"readOnlyHint": True}

    def tool(name: str, path: str, url: str = service_url, **kwargs: Any) -> ManagedTool:
        return http_tool("desk", name, url, path=path, annotations=read_only, auth=auth, **kwargs)

    return [
        tool("quote", "/quotes/{symbol}", schema=QUOTE_SCHEMA),
        tool("down", "/ping", down_url),
        tool("slow", "/slow"),
        tool("broken", "/broken"),
        tool("garbage", "/garbage"),
        tool("huge", "/huge"),
        tool("redirect", "/redirect"),
        tool("trickle", "/trickle"),
    ]


@dataclass
class Pod:
    sidecar: RunningSidecar
    upstream: FaultUpstream
    service: FaultService
    elsewhere: FaultService  # the host a redirect points to: must never be contacted
    tokens: dict[str, str]
    state_dir: Path
    build_root: Path
    clients: list[Any] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.sidecar.url

    def openai(self, agent: str) -> openai.AsyncOpenAI:
        client = openai.AsyncOpenAI(
            base_url=self.sidecar.openai_base_url, api_key=self.tokens[agent], max_retries=0
        )
        self.clients.append(client)
        return client

    def anthropic(self, agent: str) -> anthropic.AsyncAnthropic:
        client = anthropic.AsyncAnthropic(
            base_url=self.sidecar.anthropic_base_url, api_key=self.tokens[agent], max_retries=0
        )
        self.clients.append(client)
        return client

    async def close_clients(self) -> None:
        for client in self.clients:
            closed = client.close()
            if inspect.isawaitable(closed):
                await closed
        self.clients.clear()

    def audit(self, agent: str) -> list[dict[str, Any]]:
        path = self.state_dir / "audit" / f"{agent}.jsonl"
        if not path.exists():
            return []
        return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]

    async def wait_for_audit(self, agent: str, count: int) -> list[dict[str, Any]]:
        for _ in range(500):
            records = self.audit(agent)
            if len(records) >= count:
                return records
            await asyncio.sleep(0.01)
        raise AssertionError(
            f"{agent}: expected {count} audit records, got {len(self.audit(agent))}"
        )

    async def get(self, path: str, **kwargs: Any) -> tuple[int, bytes]:
        """GET from the sidecar; ``/metrics`` and ``/readyz`` from its operator listener."""
        base = self.sidecar.admin_url if path in ("/metrics", "/readyz") else self.url
        async with (
            aiohttp.ClientSession() as session,
            session.get(base + path, **kwargs) as response,
        ):
            body = await response.read()
            secret_sweep.collect(f"GET {path}", body)
            return response.status, body

    async def close(self) -> None:
        await self.close_clients()
        self.upstream.release.set()
        await self.sidecar.close()


async def start_pod(tmp_path: Path, **config: Any) -> Pod:
    upstream = await FaultUpstream().start()
    service = await FaultService().start()
    elsewhere = await FaultService().start()
    service.require_header("Authorization", f"Bearer {SERVICE_TOKEN}")
    service.reply("/slow", delay_s=1.5)
    service.reply("/broken", status=500, json={"detail": "database down"})
    service.reply("/garbage", body=b"<html>\x00oops{{", content_type="application/json")
    service.reply("/huge", size=50_000_000)
    service.reply("/redirect", status=302, redirect_to=f"http://localhost:{elsewhere.port}/steal")
    tools = fault_tools(service.url, f"http://127.0.0.1:{closed_port()}")
    patient = ToolPolicy(timeout_per_tool_ms=15000, total_timeout_ms=60000)
    hasty = ToolPolicy(timeout_per_tool_ms=400, total_timeout_ms=20000)
    agents = [
        AgentSpec("plain", tools=[]),
        AgentSpec("analyst", tools=tools, policy=patient),
        AgentSpec("hasty", tools=tools, policy=hasty),
        AgentSpec("native", tools=tools, mode="native", policy=patient),
        AgentSpec("native-hasty", tools=tools, mode="native", policy=hasty),
    ]
    root = tmp_path / "build"
    config.setdefault("upstream_timeout_ms", UPSTREAM_TIMEOUT_MS)
    tokens = write_build(
        root, agents, providers_for(upstream.openai_url, upstream.anthropic_url), **config
    )
    secret_sweep.register(SERVICE_TOKEN, *TEST_PROVIDER_KEYS.values())
    state_dir = tmp_path / "state"
    sidecar = await start_sidecar(root, state_dir, env=ENV)
    return Pod(sidecar, upstream, service, elsewhere, tokens, state_dir, root)


async def stop_pod(pod: Pod) -> None:
    status, _ = await pod.get("/metrics")  # the page goes into the credential sweep
    assert status == 200
    await pod.close()
    await pod.upstream.close()
    await pod.service.close()
    await pod.elsewhere.close()
    secret_sweep.collect_tree(pod.state_dir)
    secret_sweep.collect_tree(pod.build_root)


# --- leak accounting ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """What the sidecar holds open; after a cell (client closed) it must return to idle."""

    server_connections: int  # client connections into the sidecar
    shielded_tasks: int  # mediated loops, tool calls in flight, audits of streams cut short
    upstream_acquired: int  # pooled upstream connections in use
    tools_acquired: int
    upstream_unpooled: int  # stub-side connections with no idle pooled counterpart
    service_unpooled: int
    tasks: int  # asyncio tasks other than connection handlers and this test

    def problems(self) -> list[str]:
        return [
            f"{name}={value}" for name, value in vars(self).items() if name != "tasks" and value
        ]


def _counted_tasks() -> int:
    current = asyncio.current_task()
    return sum(
        1
        for task in asyncio.all_tasks()
        if task is not current
        and getattr(task.get_coro(), "__qualname__", "") != "RequestHandler.start"
    )


def snapshot(pod: Pod) -> Snapshot:
    state = pod.sidecar.state
    upstream_idle, upstream_acquired = state.upstream.http.usage()
    tools = state.executor.http
    tools_idle, tools_acquired = tools.usage() if tools else (0, 0)
    services_open = pod.service.open_connections() + pod.elsewhere.open_connections()
    return Snapshot(
        server_connections=pod.sidecar.listening.open_connections,
        shielded_tasks=len(state.tasks),
        upstream_acquired=upstream_acquired,
        tools_acquired=tools_acquired,
        upstream_unpooled=max(0, pod.upstream.open_connections() - upstream_idle),
        service_unpooled=max(0, services_open - tools_idle),
        tasks=_counted_tasks(),
    )


async def assert_no_leaks(pod: Pod, baseline_tasks: int) -> Snapshot:
    """Close the clients, release stalls, then wait (bounded) for the pod to be idle again."""
    await pod.close_clients()
    pod.upstream.release.set()
    current = snapshot(pod)
    for _ in range(300):
        current = snapshot(pod)
        if not current.problems() and current.tasks <= baseline_tasks:
            break
        await asyncio.sleep(0.02)
    assert not current.problems(), f"leaked after the cell: {current}"
    assert current.tasks <= baseline_tasks, f"tasks grew from {baseline_tasks}: {current}"
    pod.upstream.release = asyncio.Event()
    return current


class BackgroundLoop:
    """An event loop in a thread, so synchronous hypothesis tests can drive async servers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(_wrap(coro), self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


async def _wrap(coro: Awaitable[T]) -> T:
    return await coro
