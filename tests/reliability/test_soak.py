"""Load and soak: 200 concurrent mediated conversations against a real sidecar process.

A scripted model asks for 1-3 tool rounds per turn and answers with the tool results it was
given; conversations have two turns, so the second turn relies on continuity. Tool latency is
random. Afterwards: zero wrong answers, one audit record per request, every tool call that
reached the service audited, the hash chains verify, and the sidecar's RSS stays flat.

Meanwhile a stranger holds idle sockets open (reopening each one the sidecar closes at its
head deadline) and another agent posts bodies of many tiny items (issue 30): neither may cost
the conversations a single error.

The CI variant runs ~20 s (``.ci/run`` runs it by name, outside the fast suite); the full soak
(``-m slow``) runs several minutes. Set CLAW_SOAK_REPORT=path to get the figures and the RSS
curve as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import openai
import orjson
import pytest
from aiohttp import web

from clawpod.cli.audit import verify_command
from clawpod.sidecar.manifest import ToolAuth, ToolPolicy
from tests.reliability.wire import text, tool_call
from tests.support import secret_sweep
from tests.support.builds import AgentSpec, http_tool, providers_for, write_build
from tests.support.sidecar import TEST_PROVIDER_KEYS

REPO = Path(__file__).resolve().parents[2]
AGENTS = ("soak-0", "soak-1", "soak-2", "soak-3")
CONCURRENCY = 200
PROMPT = re.compile(r"conv (\S+) turn (\d+) rounds (\d+) prior (\d+)")
SOAK_TOOL_TOKEN = "soak-tool-credential-5d1e8f"


# --- the scripted model and the tool service ------------------------------------------------


def model_reply(body: dict[str, Any]) -> dict[str, Any]:
    """Decide the next model turn from the conversation alone (no state: any order works)."""
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    conv, turn, rounds, prior = PROMPT.fullmatch(messages[last_user]["content"]).groups()  # type: ignore[union-attr]
    earlier = [m for m in messages[:last_user] if m["role"] == "tool"]
    if len(earlier) != int(prior):
        return text("openai", f"continuity lost: {len(earlier)} earlier results, not {prior}")
    results = [orjson.loads(m["content"]) for m in messages[last_user:] if m["role"] == "tool"]
    if len(results) < int(rounds):
        symbol = f"{conv}-{turn}-{len(results)}"
        return tool_call("openai", "desk_quote", {"symbol": symbol}, call_id=f"c-{symbol}")
    seen = [r["data"]["symbol"] if r.get("ok") else r["error"]["code"] for r in results]
    return text("openai", "result " + ",".join(seen))


async def model_handler(request: web.Request) -> web.Response:
    body = await request.json()
    await asyncio.sleep(random.uniform(0, 0.02))
    return web.json_response(model_reply(body))


async def quote_handler(request: web.Request) -> web.Response:
    if request.headers.get("Authorization") != f"Bearer {SOAK_TOOL_TOKEN}":
        return web.json_response({"error": "unauthorized"}, status=401)
    await asyncio.sleep(random.uniform(0, 0.15))
    request.app[HITS][request.match_info["symbol"]] += 1
    return web.json_response({"symbol": request.match_info["symbol"]})


HITS = web.AppKey("hits", Counter)


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


# --- the sidecar process --------------------------------------------------------------------


@dataclass
class SidecarProcess:
    process: subprocess.Popen
    url: str

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        kilobytes = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]
        return kilobytes / 1024

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def start_sidecar_process(build: Path, state: Path, log: Path) -> SidecarProcess:
    env = {
        **os.environ,
        **TEST_PROVIDER_KEYS,
        "SOAK_TOOL_TOKEN": SOAK_TOOL_TOKEN,
        "CLAW_SSE_KEEPALIVE_MS": "250",
        "PYTHONPATH": str(REPO),
    }
    command = [
        sys.executable,
        "-m",
        "clawpod.sidecar",
        "--build",
        str(build),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--admin-port",
        "0",
        "--state-dir",
        str(state),
    ]
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log.open("wb"), text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # "listening on http://HOST:PORT"
    match = re.search(r"listening on (http://\S+)", line)
    if match is None:
        process.kill()
        raise AssertionError(f"sidecar did not start: {line!r} {log.read_text()[-2000:]}")
    return SidecarProcess(process, match.group(1))


# --- the load -------------------------------------------------------------------------------


@dataclass
class Figures:
    seconds: float = 0.0
    conversations: int = 0
    requests: dict[str, int] = field(default_factory=lambda: Counter())
    streamed: int = 0
    wrong: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    expected_calls: int = 0
    rss_mb: list[tuple[float, float]] = field(default_factory=list)  # (seconds, MB)
    idle_sockets_closed: int = 0  # by the sidecar, at the head deadline
    bodies_refused: Counter[int] = field(default_factory=Counter)  # status -> count


async def converse(client: openai.AsyncOpenAI, agent: str, conv: str, figures: Figures) -> None:
    """Two turns; the second carries the first answer, so its hidden rounds come back."""
    messages: list[dict[str, Any]] = []
    prior = 0
    for turn in (1, 2):
        rounds = random.randint(1, 3)
        messages.append(
            {"role": "user", "content": f"conv {conv} turn {turn} rounds {rounds} prior {prior}"}
        )
        expected = "result " + ",".join(f"{conv}-{turn}-{k}" for k in range(rounds))
        stream = random.random() < 0.25
        answer = await ask(client, messages, stream)
        figures.requests[agent] += 1
        figures.streamed += stream
        figures.expected_calls += rounds
        if answer != expected:
            figures.wrong.append(f"{conv} turn {turn}: {answer!r} != {expected!r}")
            return
        messages.append({"role": "assistant", "content": answer})
        prior += rounds
    figures.conversations += 1


async def ask(client: openai.AsyncOpenAI, messages: list[dict[str, Any]], stream: bool) -> str:
    if not stream:
        reply = await client.chat.completions.create(model="gpt-4o", messages=messages)
        return reply.choices[0].message.content or ""
    parts = []
    async for chunk in await client.chat.completions.create(
        model="gpt-4o", messages=messages, stream=True
    ):
        parts.extend(choice.delta.content or "" for choice in chunk.choices)
    return "".join(parts)


async def worker(
    number: int, clients: dict[str, openai.AsyncOpenAI], deadline: float, figures: Figures
) -> None:
    agent = AGENTS[number % len(AGENTS)]
    sequence = 0
    while time.monotonic() < deadline:
        sequence += 1
        try:
            await converse(clients[agent], agent, f"w{number}s{sequence}", figures)
        except openai.APIError as exc:
            figures.errors.append(f"w{number}: {type(exc).__name__}: {exc}")
            secret_sweep.collect("soak error", str(exc))


IDLE_SOCKETS = 300
HOSTILE = "soak-hostile"
TINY_ITEMS = orjson.dumps(
    {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}] * 150_000}
)  # 4.5 MB of one-character messages


async def hold_idle_socket(address: tuple[str, int], stop: asyncio.Event, figures: Figures) -> None:
    """One socket that never sends a byte, reopened each time the sidecar closes it."""
    stopped = asyncio.ensure_future(stop.wait())
    while not stop.is_set():
        reader, writer = await asyncio.open_connection(*address)
        reading = asyncio.ensure_future(reader.read(1))
        await asyncio.wait({reading, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if reading.done():
            figures.idle_sockets_closed += 1
        reading.cancel()
        writer.close()


async def post_tiny_items(url: str, token: str, stop: asyncio.Event, figures: Figures) -> None:
    async with httpx2.AsyncClient(timeout=60) as http:
        while not stop.is_set():
            response = await http.post(
                url + "/v1/chat/completions",
                content=TINY_ITEMS,
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            figures.bodies_refused[response.status_code] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)


async def sample_rss(
    sidecar: SidecarProcess, started: float, stop: asyncio.Event, figures: Figures
) -> None:
    while not stop.is_set():
        figures.rss_mb.append((round(time.monotonic() - started, 1), round(sidecar.rss_mb(), 1)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 2.0)
    figures.rss_mb.append((round(time.monotonic() - started, 1), round(sidecar.rss_mb(), 1)))


async def soak(tmp_path: Path, seconds: float) -> Figures:
    model = web.Application()
    model.router.add_post("/v1/chat/completions", model_handler)
    service = web.Application()
    service[HITS] = Counter()
    service.router.add_get("/quotes/{symbol}", quote_handler)
    model_runner, model_url = await serve(model)
    service_runner, service_url = await serve(service)
    quote = http_tool(
        "desk",
        "quote",
        service_url,
        path="/quotes/{symbol}",
        schema={
            "type": "object",
            "properties": {"symbol": {"type": "string"}},
            "required": ["symbol"],
        },
        annotations={"readOnlyHint": True},
        auth=ToolAuth(type="bearer", env="SOAK_TOOL_TOKEN"),
    )
    policy = ToolPolicy(timeout_per_tool_ms=5000, total_timeout_ms=60000)
    specs = [AgentSpec(agent, [quote], policy=policy) for agent in AGENTS]
    specs.append(AgentSpec(HOSTILE, [quote], policy=policy))
    build, state = tmp_path / "build", tmp_path / "state"
    tokens = write_build(build, specs, providers_for(model_url + "/v1"))
    secret_sweep.register(SOAK_TOOL_TOKEN, *TEST_PROVIDER_KEYS.values())
    sidecar = start_sidecar_process(build, state, tmp_path / "sidecar.log")
    figures = Figures()
    http = openai.DefaultAsyncHttpxClient(
        limits=httpx2.Limits(max_connections=CONCURRENCY + 50), timeout=120
    )
    clients = {
        agent: openai.AsyncOpenAI(
            base_url=sidecar.url + "/v1", api_key=tokens[agent], max_retries=0, http_client=http
        )
        for agent in AGENTS
    }
    try:
        started = time.monotonic()
        stop = asyncio.Event()
        sampler = asyncio.ensure_future(sample_rss(sidecar, started, stop, figures))
        address = ("127.0.0.1", int(sidecar.url.rsplit(":", 1)[1]))
        hostile = [
            *(hold_idle_socket(address, stop, figures) for _ in range(IDLE_SOCKETS)),
            post_tiny_items(sidecar.url, tokens[HOSTILE], stop, figures),
        ]
        attacks = asyncio.gather(*hostile)
        deadline = started + seconds
        await asyncio.gather(*(worker(n, clients, deadline, figures) for n in range(CONCURRENCY)))
        figures.seconds = round(time.monotonic() - started, 1)
        stop.set()
        await sampler
        await attacks
    finally:
        await http.aclose()
        sidecar.stop()
        await model_runner.cleanup()
        await service_runner.cleanup()
    check(figures, state, service[HITS])
    return figures


def check(figures: Figures, state: Path, hits: Counter) -> None:
    assert figures.errors == [], figures.errors[:5]
    assert set(figures.bodies_refused) == {413}, figures.bodies_refused  # each, cheaply
    if figures.seconds > 15:  # past the 10 s head deadline: the idle sockets were let go
        assert figures.idle_sockets_closed >= IDLE_SOCKETS
    assert figures.wrong == [], figures.wrong[:5]
    assert figures.conversations >= CONCURRENCY
    executed = 0
    for agent in AGENTS:
        lines = (state / "audit" / f"{agent}.jsonl").read_bytes().splitlines()
        records = [orjson.loads(line) for line in lines]
        assert len(records) == figures.requests[agent], agent  # no lost (or extra) record
        assert all(r["outcome"]["status"] == "ok" for r in records)
        executed += sum(
            1 for r in records for t in r["tool_trace"] for c in t["calls"] if c["executed"]
        )
    assert executed == sum(hits.values()) == figures.expected_calls
    out = io.StringIO()
    assert verify_command(state, out) == 0, out.getvalue()


def rss_growth(samples: list[tuple[float, float]]) -> float:
    """MB between the median of the second quarter (warmed up) and of the last quarter."""
    values = [mb for _, mb in samples]
    quarter = max(1, len(values) // 4)
    warmed = _median(values[quarter : 2 * quarter] or values)
    last = _median(values[-quarter:])
    return last - warmed


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def report(figures: Figures) -> dict[str, Any]:
    requests = sum(figures.requests.values())
    summary = {
        "seconds": figures.seconds,
        "concurrency": CONCURRENCY,
        "conversations": figures.conversations,
        "requests": requests,
        "streamed_requests": figures.streamed,
        "tool_calls": figures.expected_calls,
        "wrong_answers": len(figures.wrong),
        "errors": len(figures.errors),
        "idle_sockets_closed": figures.idle_sockets_closed,
        "tiny_item_bodies": dict(figures.bodies_refused),
        "rss_mb_start_peak_end": [
            figures.rss_mb[0][1],
            max(mb for _, mb in figures.rss_mb),
            figures.rss_mb[-1][1],
        ],
        "rss_growth_after_warmup_mb": round(rss_growth(figures.rss_mb), 1),
        "rss_curve": figures.rss_mb,
    }
    target = os.environ.get("CLAW_SOAK_REPORT")
    if target:
        Path(target).write_text(json.dumps(summary, indent=1))
    print("\nsoak:", json.dumps({k: v for k, v in summary.items() if k != "rss_curve"}))
    return summary


@pytest.mark.slow
async def test_soak_ci(tmp_path: Path) -> None:
    """CI size: 200 concurrent conversations for ~20 s (CI runs it beside the fast suite)."""
    figures = await soak(tmp_path, seconds=float(os.environ.get("CLAW_SOAK_SECONDS", "20")))
    summary = report(figures)
    assert summary["rss_growth_after_warmup_mb"] < 30


@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_soak_full(tmp_path: Path) -> None:
    """Several minutes of 200 concurrent conversations: RSS must stay flat."""
    figures = await soak(tmp_path, seconds=float(os.environ.get("CLAW_SOAK_SECONDS", "300")))
    summary = report(figures)
    assert summary["rss_growth_after_warmup_mb"] < 20
