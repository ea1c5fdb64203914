"""The main job of clawpod, on this machine, with no network and no keys (run by scripts/demo.sh).

It compiles the example pod with its provider pointed at the scripted demo model
(compose/examples/trading-desk/demo-model), serves the example tool services and that model on
127.0.0.1 (random ports), starts the real sidecar (`python -m clawpod.sidecar`) and runs the
example agent (agent/run.py, unchanged) twice against it:
- the analyst (mediated) asks a question: the sidecar injects its grants, runs the tools (an
  HTTP service with the read-only token, an MCP service) and feeds the results back;
- the trader (native: its runner calls tools over MCP) places an order: the pod's rule holds it
  for an approval, which the demo gives with `clawc approvals approve` on the operator API;
  the order then runs with the trading token.
It prints what happened step by step, then the audit (`clawc audit show` and `verify`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import io
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import uvicorn
import yaml
from aiohttp import web

from clawpod.cli.clawc import main as clawc

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "compose" / "examples" / "trading-desk"
ANALYST, TRADER = "analyst", "trader"
QUESTION = (
    "What is NVDA trading at, what are its fundamentals, and how much buying power do I have?"
)
ORDER = "Buy 10 NVDA."
APPROVAL_REASON = "checked by the desk head"
WIDTH = 100
SCRIPTED_NOTE = (
    "Its model is the SCRIPTED demo model (compose/examples/trading-desk/demo-model): fixed "
    "rules, not an LLM. For a real local model see docs/local-models.md."
)
START_TIMEOUT_S = 30.0
AGENT_TIMEOUT_S = 60.0
# Values made up for this run: the sidecar needs them, nothing outside this machine sees them.
SECRETS = {
    "OPENAI_API_KEY": "demo-provider-key-" + secrets.token_hex(8),
    "TRADING_RO_TOKEN": "demo-trading-read-token-" + secrets.token_hex(8),
    "TRADING_RW_TOKEN": "demo-trading-write-token-" + secrets.token_hex(8),
    "NEWS_API_KEY": "demo-news-key-" + secrets.token_hex(8),
    "RESEARCH_API_TOKEN": "demo-research-token-" + secrets.token_hex(8),
    "CLAW_AUDIT_KEY": "demo-audit-key-" + secrets.token_hex(16),
    "CLAW_OPERATOR_TOKEN": "demo-operator-token-" + secrets.token_hex(8),
}


def progress(message: str) -> None:
    print(f"==> {message}", flush=True)


def load_example(service: str) -> ModuleType:
    """An example service's app.py (its folder name is not an importable package)."""
    name = "clawpod_demo_" + service.replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, EXAMPLE / service / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@dataclass
class Exchange:
    """One HTTP request a tool service received, and its answer."""

    service: str
    request_line: str
    headers: list[tuple[str, str]]
    status: int
    body: str


@dataclass
class Demo:
    tmp: Path
    runners: list[web.AppRunner] = field(default_factory=list)
    servers: list[tuple[uvicorn.Server, asyncio.Task[None]]] = field(default_factory=list)
    exchanges: list[Exchange] = field(default_factory=list)
    sidecar: asyncio.subprocess.Process | None = None

    async def serve(self, service: str, app: web.Application) -> str:
        """Serve ``app`` on 127.0.0.1 (a free port) and record what it is sent."""

        async def record(request: web.Request, response: web.StreamResponse) -> None:
            body = getattr(response, "body", None)
            self.exchanges.append(
                Exchange(
                    service=service,
                    request_line=f"{request.method} {request.url}",
                    headers=list(request.headers.items()),
                    status=response.status,
                    body=body.decode() if isinstance(body, bytes) else "",
                )
            )

        app.on_response_prepare.append(record)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    async def serve_asgi(self, app: Any) -> str:
        """Serve an ASGI ``app`` (the MCP service) on 127.0.0.1 (a free port) with uvicorn."""
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        self.servers.append((server, task))
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def close(self) -> None:
        if self.sidecar is not None and self.sidecar.returncode is None:
            self.sidecar.terminate()
            try:
                await asyncio.wait_for(self.sidecar.wait(), 10)
            except TimeoutError:
                self.sidecar.kill()
                await self.sidecar.wait()
        for runner in self.runners:
            await runner.cleanup()
        for server, task in self.servers:
            server.should_exit = True
            await task


def local_pod(tmp: Path, urls: dict[str, str], model_url: str) -> Path:
    """The example pod, with services and the provider on this machine instead of the pod's."""
    pod = yaml.safe_load((EXAMPLE / "pod.yml").read_text(encoding="utf-8"))
    pod["x-claw"].pop("root", None)  # the copy below keeps every named file in its own tree
    pod["x-claw"]["providers"] = {
        "openai": {
            "api": "openai",
            "base-url": model_url + "/v1",
            "key-env": "OPENAI_API_KEY",
            "models": ["gpt-*"],
        }
    }
    for name, service in pod["services"].items():
        if "build" in service:
            service["build"] = str(EXAMPLE / service["build"])
        claw = service.get("x-claw", {})
        if "describe" in claw:  # descriptors are read only from inside the pod's tree
            source = (EXAMPLE / claw["describe"]).resolve()
            shutil.copytree(source.parent, tmp / "descriptors", dirs_exist_ok=True)
            claw["describe"] = f"descriptors/{source.name}"
        if name in urls:
            claw["url"] = urls[name]
    path = tmp / "pod.yml"
    path.write_text(yaml.safe_dump(pod, sort_keys=False), encoding="utf-8")
    return path


async def start_sidecar(demo: Demo, build: Path, state: Path) -> tuple[str, str]:
    """The sidecar's URL for agents and its operator listener's URL."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}
    log = (demo.tmp / "sidecar.log").open("wb")
    demo.sidecar = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "clawpod.sidecar",
        *("--build", str(build), "--host", "127.0.0.1", "--port", "0"),
        *("--admin-host", "127.0.0.1", "--admin-port", "0"),
        *("--state-dir", str(state)),
        env={**env, **SECRETS},
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
    )
    assert demo.sidecar.stdout is not None
    urls: dict[str, str] = {}
    async with asyncio.timeout(START_TIMEOUT_S):
        while line := (await demo.sidecar.stdout.readline()).decode():
            if match := re.match(r"(listening|operator listener) on (http://\S+)", line):
                urls[match.group(1)] = match.group(2)
            if len(urls) == 2:
                return urls["listening"], urls["operator listener"]
    raise RuntimeError("the sidecar exited before it listened; see its log above")


def agent_env(build: Path, agent: str, sidecar_url: str, question: str) -> dict[str, str]:
    """The agent's env file, as a pod gives it, with the in-pod sidecar address replaced; a
    native agent also gets its mcp.json (mounted at /claw/mcp.json in a pod)."""
    pod = yaml.safe_load((EXAMPLE / "pod.yml").read_text(encoding="utf-8"))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "CLAW_")) and "PROXY" not in k.upper()
    }
    env.update(pod["services"][agent].get("environment") or {})
    for line in (build / "agents" / f"{agent}.env").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value.replace("http://claw-sidecar:8080", sidecar_url)
    env["CLAW_QUESTION"] = question
    if (pod["services"][agent].get("x-claw") or {}).get("mode") == "native":
        config = build.parent / f"{agent}-mcp.json"
        text = (build / "context" / agent / "mcp.json").read_text(encoding="utf-8")
        config.write_text(text.replace("http://claw-sidecar:8080", sidecar_url), encoding="utf-8")
        env["CLAW_MCP_CONFIG"] = str(config)
    return env


async def run_agent(env: dict[str, str]) -> tuple[int, str, str]:
    agent = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE / "agent" / "run.py"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(AGENT_TIMEOUT_S):
            out, err = await agent.communicate()
    finally:
        if agent.returncode is None:
            agent.kill()
            await agent.wait()
    return agent.returncode or 0, out.decode(), err.decode()


# ---- presenting -----------------------------------------------------------------------------


def wrap(text: str, indent: int) -> str:
    """``text`` in lines of at most WIDTH columns, indented by ``indent``; a line that does not
    fit goes on with two more spaces of indent."""
    pad = " " * indent
    lines = []
    for paragraph in text.splitlines() or [""]:
        lines += textwrap.wrap(
            paragraph,
            WIDTH,
            initial_indent=pad,
            subsequent_indent=pad + "  ",
            break_long_words=True,
            break_on_hyphens=False,
            drop_whitespace=False,
        ) or [pad]
    return "\n".join(line.rstrip() for line in lines)


def masked(text: str) -> str:
    """``text`` with every credential of this run replaced by the name of its variable."""
    for name, value in SECRETS.items():
        text = text.replace(value, f"<${name}: masked>")
    return text


def heading(number: int, title: str) -> None:
    print(f"\n{number}. {title}")


def show_tools(model_requests: list[dict[str, Any]], model_call: Exchange | None) -> None:
    heading(1, "The agent sent its question with no tools; the sidecar added the analyst's grants:")
    for tool in model_requests[0].get("tools") or []:
        function = tool["function"]
        print(wrap(f"{function['name']:<34}{function.get('description', '')}", 5))
    if model_call is not None:
        print(wrap("and called the model with the provider key, not the agent's token:", 3))
        print(wrap(model_call.request_line, 5))
        for name, value in model_call.headers:
            if name.lower() == "authorization":
                print(wrap(masked(f"{name}: {value}"), 7))


def show_calls(number: int, title: str, replies: list[dict[str, Any]]) -> None:
    calls = [c for r in replies for c in r.get("tool_calls") or []]
    heading(number, title.format(count=len(calls)))
    for call in calls:
        function = call["function"]
        print(wrap(f"{function['name']}({function['arguments']})", 5))


def show_exchanges(exchanges: list[Exchange], mcp_calls: list[dict[str, Any]]) -> None:
    shown = {"authorization", "x-news-key", "content-type", "idempotency-key"}
    for exchange in exchanges:
        print(wrap(masked(exchange.request_line), 5))
        for name, value in exchange.headers:
            if name.lower() in shown:
                print(wrap(masked(f"{name}: {value}"), 7))
        print(wrap(f"-> {exchange.status} {masked(exchange.body)}", 7))
    for call in mcp_calls:
        print(wrap(f"{call['method']} {call['url']}  (MCP tools/call {call['tool']})", 5))
        print(wrap(masked(f"Authorization: {call['authorization']}"), 7))


def show_results(model_requests: list[dict[str, Any]]) -> None:
    heading(4, "The results the sidecar fed back to the model (role: tool):")
    for message in model_requests[-1].get("messages") or []:
        if message.get("role") == "tool":
            print(wrap(masked(f"{message['tool_call_id']}: {message['content']}"), 5))


def show_answer(number: int, answer: str) -> None:
    heading(number, "The model's final answer, as the agent printed it:")
    print(wrap(answer.strip(), 5))


def show_clawc(shown: list[str], output: str) -> None:
    print(wrap("$ clawc " + " ".join(shown), 3))
    print(wrap(masked(output.rstrip()), 5))


def show_audit(number: int, state: Path) -> int:
    heading(number, "The audit log of the sidecar's state dir:")
    status = 0
    for action in ("show", "verify"):
        buffer = io.StringIO()
        # The chain is keyed: checking it takes the sidecar's key, from the environment.
        os.environ["CLAW_AUDIT_KEY"] = SECRETS["CLAW_AUDIT_KEY"]
        status |= clawc(["audit", action, str(state)], buffer, buffer)
        show_clawc(["audit", action, "STATE_DIR"], buffer.getvalue())
    return status


def show_agent_failure(status: int, out: str, err: str, log: Path) -> None:
    print(f"\nthe agent exited with status {status}:")
    print(wrap(masked((out + err).strip()[-2000:]), 2))
    print("sidecar log (last lines):")
    print(wrap(masked("\n".join(log.read_text(errors="replace").splitlines()[-10:])), 2))


# ---- the run --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running(tmp: Path) -> AsyncIterator[Demo]:
    demo = Demo(tmp)
    try:
        yield demo
    finally:
        await demo.close()


@dataclass
class Services:
    """The example pod's services and the demo model, served on 127.0.0.1."""

    urls: dict[str, str]
    model: ModuleType
    model_app: web.Application
    model_url: str
    research: Any  # the research-mcp app: what it was sent is in .received

    @property
    def model_requests(self) -> list[dict[str, Any]]:
        return self.model_app[self.model.RECEIVED]

    def mcp_calls(self) -> list[dict[str, Any]]:
        base = self.urls["research-mcp"]
        return [
            {**r, "url": base + r["path"]}
            for r in self.research.received
            if r["rpc"] == "tools/call"
        ]


async def start_services(demo: Demo) -> Services:
    progress("starting the example tool services and the scripted demo model on 127.0.0.1")
    trading = load_example("trading-api")
    news = load_example("market-news")
    research_module = load_example("research-mcp")
    model = load_example("demo-model")
    research = research_module.create_app(SECRETS["RESEARCH_API_TOKEN"])
    trading_app = trading.create_app(SECRETS["TRADING_RO_TOKEN"], SECRETS["TRADING_RW_TOKEN"])
    urls = {
        "trading-api": await demo.serve("trading-api", trading_app),
        "market-news": await demo.serve("market-news", news.create_app(SECRETS["NEWS_API_KEY"])),
        "research-mcp": await demo.serve_asgi(research),
    }
    model_app = model.create_app()
    model_url = await demo.serve("demo-model", model_app)
    return Services(urls, model, model_app, model_url, research)


async def ask_analyst(
    demo: Demo, services: Services, build: Path, sidecar_url: str, question: str
) -> bool:
    """Part one: the mediated analyst's question, steps 1 to 5."""
    demo.exchanges.clear()
    services.research.received.clear()
    first = len(services.model_requests)
    status, out, err = await run_agent(agent_env(build, ANALYST, sidecar_url, question))
    model_requests = services.model_requests[first:]
    if status != 0 or not model_requests:
        show_agent_failure(status, out, err, demo.tmp / "sidecar.log")
        return False
    model_calls = [e for e in demo.exchanges if e.service == "demo-model"]
    tool_exchanges = [e for e in demo.exchanges if e.service != "demo-model"]
    print()
    print(wrap(f'Agent "{ANALYST}" (agent/run.py, unchanged; mediated) asked: "{question}"', 0))
    print(wrap(SCRIPTED_NOTE, 0))
    replies = [services.model.next_message(body) for body in model_requests]
    show_tools(model_requests, model_calls[0] if model_calls else None)
    title = "The model answered with {count} tool call(s), which the sidecar runs itself:"
    show_calls(2, title, replies)
    heading(3, "The requests the sidecar made (the agent never sees these URLs or keys):")
    print(wrap("The trading API gets the read-only token of principal desk-readonly.", 3))
    show_exchanges(tool_exchanges, services.mcp_calls())
    show_results(model_requests)
    show_answer(5, out)
    return True


async def pending_approval(sidecar_url: str, agent: asyncio.Task[Any]) -> dict[str, Any] | None:
    """The first pending approval on the operator API, once the agent's call has created it
    (``None`` if the agent finished first)."""
    headers = {"Authorization": f"Bearer {SECRETS['CLAW_OPERATOR_TOKEN']}"}
    async with aiohttp.ClientSession(sidecar_url, headers=headers) as session:
        while not agent.done():
            async with session.get("/operator/approvals") as response:
                listed = (await response.json())["approvals"] if response.status == 200 else []
            if pending := [a for a in listed if a["status"] == "pending"]:
                return pending[0]
            await asyncio.sleep(0.05)
    return None


async def clawc_in_thread(arguments: list[str]) -> tuple[int, str]:
    """``clawc ARGUMENTS`` (it blocks on HTTP: a thread keeps this loop serving the tools)."""
    buffer = io.StringIO()
    status = await asyncio.to_thread(clawc, arguments, buffer, buffer)
    return status, buffer.getvalue()


async def order_as_trader(
    demo: Demo, services: Services, build: Path, sidecar: tuple[str, str], order: str
) -> bool:
    """Part two: the native trader's order, held for an approval, approved, executed."""
    demo.exchanges.clear()
    first = len(services.model_requests)
    sidecar_url, operator_url = sidecar
    env = agent_env(build, TRADER, sidecar_url, order)
    agent = asyncio.ensure_future(run_agent(env))
    async with asyncio.timeout(AGENT_TIMEOUT_S):
        approval = await pending_approval(operator_url, agent)
    if approval is None:
        show_agent_failure(*(await agent), demo.tmp / "sidecar.log")
        return False
    print()
    print(
        wrap(
            f'Agent "{TRADER}" (the same agent/run.py; native: it calls its tools over MCP) '
            f'asked: "{order}"',
            0,
        )
    )
    replies = [services.model.next_message(body) for body in services.model_requests[first:]]
    title = "The model answered with {count} tool call(s); the runner sent them to /mcp:"
    show_calls(6, title, replies)
    heading(7, "The pod's rule (effect: confirm) holds the order until an operator approves it:")
    os.environ["CLAW_OPERATOR_TOKEN"] = SECRETS["CLAW_OPERATOR_TOKEN"]
    listing = ["approvals", "list", "--sidecar", operator_url]
    show_clawc(listing, (await clawc_in_thread(listing))[1])
    approve = ["approvals", "approve", approval["id"], "--sidecar", operator_url]
    approve += ["--reason", APPROVAL_REASON]
    shown = [*approve[:-1], f'"{APPROVAL_REASON}"']
    approved, output = await clawc_in_thread(approve)
    show_clawc(shown, output)
    if approved != 0:
        agent.cancel()  # run_agent stops the runner it started
        return False
    print(wrap("(CLAW_OPERATOR_TOKEN comes from the environment; an agent's token is refused)", 5))
    status, out, err = await agent
    if status != 0:
        show_agent_failure(status, out, err, demo.tmp / "sidecar.log")
        return False
    heading(8, "Approved, the sidecar ran the order with the trading token of desk-trader:")
    show_exchanges([e for e in demo.exchanges if e.service != "demo-model"], [])
    print(wrap("(the analyst's quote in step 3 carried $TRADING_RO_TOKEN, which cannot trade)", 5))
    show_answer(9, out)
    return True


async def run(question: str, order: str, tmp: Path) -> int:
    async with running(tmp) as demo:
        services = await start_services(demo)
        progress("compiling compose/examples/trading-desk/pod.yml (provider: the demo model)")
        build, state = tmp / "build", tmp / "state"
        quiet = io.StringIO()
        pod = local_pod(tmp, services.urls, services.model_url)
        if clawc(["compile", str(pod), "-o", str(build)], quiet, quiet) != 0:
            print(quiet.getvalue(), file=sys.stderr)
            return 1
        progress("starting the sidecar: python -m clawpod.sidecar --build BUILD --port 0")
        sidecar_url, operator_url = await start_sidecar(demo, build, state)
        progress(f"sidecar listening on {sidecar_url}; running the example agent '{ANALYST}'")
        if not await ask_analyst(demo, services, build, sidecar_url, question):
            return 1
        sidecar = (sidecar_url, operator_url)
        if not await order_as_trader(demo, services, build, sidecar, order):
            return 1
        return show_audit(10, state)


def bypass_proxies_for_this_machine() -> None:
    """Everything the demo talks to is on 127.0.0.1: a proxy set in this shell (which clawc's
    and the MCP SDK's HTTP clients would honour, and the sidecar inherits) must not see it."""
    for name in ("no_proxy", "NO_PROXY"):
        listed = [entry for entry in os.environ.get(name, "").split(",") if entry]
        os.environ[name] = ",".join([*listed, "127.0.0.1", "localhost"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo.sh", description=__doc__)
    parser.add_argument("--question", default=QUESTION, help="what the analyst asks")
    parser.add_argument("--order", default=ORDER, help="what the trader is told to do")
    args = parser.parse_args(argv)
    bypass_proxies_for_this_machine()
    with tempfile.TemporaryDirectory(prefix="clawpod-demo-") as tmp:
        return asyncio.run(_guarded(run(args.question, args.order, Path(tmp))))


async def _guarded(job: Any) -> int:
    """Run ``job``; SIGTERM or SIGINT cancels it, so that everything it started is stopped."""
    task = asyncio.ensure_future(job)
    loop = asyncio.get_running_loop()
    stop: Callable[[], bool] = task.cancel
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    try:
        return await task
    except asyncio.CancelledError:
        print("demo interrupted; everything it started has been stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
