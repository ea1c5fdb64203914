"""The clawpod benchmark: one run of every scenario, as ratios to direct, a bare forwarder, LiteLLM.

Run it through ``bench/run.sh`` (which installs wrk and LiteLLM's virtualenv when missing).
All servers run on 127.0.0.1 with random ports; everything is measured in one run so the
ratios share the same machine noise. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib.metadata
import json
import os
import platform
import resource
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench import interleaved, loadgen, streamclient, workloads
from bench.processes import Server, cpu_seconds, free_port, rss_bytes, start_server
from clawpod.sidecar.audit.log import AUDIT_KEY_ENV
from clawpod.sidecar.manifest import Provider, ToolPolicy, effect_of

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO / "bench"
LITELLM_VENV = BENCH_DIR / ".venv-litellm"
PROVIDER_KEYS = {"OPENAI_API_KEY": "sk-bench-openai", "ANTHROPIC_API_KEY": "sk-bench-anthropic"}
PASS_MODEL = "gpt-4o-mini"
ANTHROPIC_MODEL = "claude-bench"
# A Messages request to a Chat-Completions-only provider (contract §18): the same body as
# anthropic_json, translated both ways.
TRANSLATED_MODEL = "xlate-bench"
TRANSLATED = "anthropic_to_chat_json"
# The same, streamed: the Chat-only provider's 200-chunk stream translated live into Messages,
# compared with the same stream relayed untouched to a Chat caller (openai_sse).
TRANSLATED_SSE = "anthropic_to_chat_sse"
# A provider that serves OpenAI Responses only: Chat and Messages callers of it are translated.
RESPONSES_MODEL = "resp-bench"
# The other directions, whole and streamed: a Responses caller (Codex) of the Chat-only
# provider and of a Messages provider, a Chat caller of a Messages provider, and Chat and
# Messages callers of a Responses-only provider; each over its caller's pass-through
# (openai_json or anthropic_json; streams over openai_sse, anthropic_sse or responses_sse).
OTHER_DIRECTIONS = {
    "responses_to_chat_json": lambda: workloads.responses_request(TRANSLATED_MODEL),
    "responses_to_chat_sse": lambda: workloads.responses_request(TRANSLATED_MODEL, stream=True),
    "responses_to_messages_json": lambda: workloads.responses_request(ANTHROPIC_MODEL),
    "responses_to_messages_sse": lambda: workloads.responses_request(ANTHROPIC_MODEL, stream=True),
    "chat_to_messages_json": lambda: workloads.openai_chat(ANTHROPIC_MODEL),
    "chat_to_messages_sse": lambda: workloads.openai_chat(ANTHROPIC_MODEL, stream=True),
    "chat_to_responses_json": lambda: workloads.openai_chat(RESPONSES_MODEL),
    "chat_to_responses_sse": lambda: workloads.openai_chat(RESPONSES_MODEL, stream=True),
    "anthropic_to_responses_json": lambda: workloads.anthropic_messages(RESPONSES_MODEL),
    "anthropic_to_responses_sse": lambda: workloads.anthropic_messages(
        RESPONSES_MODEL, stream=True
    ),
}
TARGET_NAMES = ("direct", "bare", "sidecar", "litellm")
TTFB_MAX_SECONDS = 15.0  # caps slow proxies' stream runs (LiteLLM needs ~0.2 s per stream)


@dataclass(frozen=True)
class Settings:
    quick: bool
    duration_s: int  # wrk takes whole seconds
    warmup_s: int
    concurrencies: tuple[int, ...]
    ttfb_concurrencies: tuple[int, ...]
    rounds: tuple[int, ...]
    stream_clients: int
    compile_size: tuple[int, int, int]
    litellm: bool
    stream_pause_ms: float = 0.0  # the upstream's pause after each stream chunk (bench.ab --paced)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        if args.quick:
            return cls(True, 1, 0, (1, 16), (1, 16), (0, 1, 3), 20, (5, 3, 3), args.litellm)
        return cls(
            False,
            args.duration,
            1,
            (1, 16, 64, 256),
            (1, 16, 64),
            (0, 1, 3, 8),
            500,
            (100, 20, 20),
            args.litellm,
        )

    def ttfb_requests(self, concurrency: int) -> int:
        return concurrency * (2 if self.quick else 10) + (8 if self.quick else 100)


@dataclass
class Target:
    """One way to reach the upstream: base URL, credentials, and the proxy process if any."""

    name: str
    base_url: str
    openai_headers: dict[str, str]
    anthropic_headers: dict[str, str] | None
    process: Server | None = None
    # Agent -> token, where the target is a sidecar on a build of its own (bench.ab --own-builds).
    tokens: dict[str, str] = field(default_factory=dict)


@dataclass
class StubClient:
    """Keep-alive connection to a stub's /_stats, so reading counters opens no new connection."""

    server: Server
    connection: http.client.HTTPConnection = field(init=False)

    def __post_init__(self) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)

    def _call(self, method: str, path: str) -> dict[str, Any]:
        for attempt in range(2):
            try:
                self.connection.request(method, path)
                return json.loads(self.connection.getresponse().read())
            except (OSError, http.client.HTTPException):
                self.connection.close()  # the stub closed an idle keep-alive connection
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def reset(self) -> None:
        self._call("POST", "/_reset")

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/_stats")


class Bench:
    def __init__(self, settings: Settings, workdir: Path) -> None:
        self.settings = settings
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.servers: list[Server] = []
        self.targets: dict[str, Target] = {}
        self.skipped: dict[str, str] = {}
        self.bodies: dict[str, Path] = {}
        self.tokens: dict[str, str] = {}
        self.sidecar_admin_port = 0

    # --- processes --------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str], **kwargs: Any) -> Server:
        port = free_port()
        server = start_server(
            name, [a.replace("{port}", str(port)) for a in argv], port, self.logs, **kwargs
        )
        self.servers.append(server)
        return server

    def stop_all(self) -> None:
        for server in reversed(self.servers):
            server.stop()

    def start(self) -> None:
        python = sys.executable
        upstream = [python, "-m", "bench.upstream", "--port", "{port}"]
        if self.settings.stream_pause_ms:
            upstream += ["--pause-ms", str(self.settings.stream_pause_ms)]
        self.upstream = self._start("upstream", upstream, cwd=REPO)
        self.tools = self._start(
            "tools", [python, "-m", "bench.toolservice", "--port", "{port}"], cwd=REPO
        )
        self.upstream_stats = StubClient(self.upstream)
        self.tool_stats = StubClient(self.tools)
        self.targets["direct"] = Target(
            "direct",
            self.upstream.url(),
            {"Authorization": f"Bearer {PROVIDER_KEYS['OPENAI_API_KEY']}"},
            {"x-api-key": PROVIDER_KEYS["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"},
        )
        bare = self._start(
            "bare",
            [
                python,
                "-m",
                "bench.forwarder",
                "--port",
                "{port}",
                "--upstream",
                self.upstream.url(),
            ],
            cwd=REPO,
        )
        self.targets["bare"] = Target(
            "bare",
            bare.url(),
            {"Authorization": "Bearer anything"},
            {"x-api-key": "anything", "anthropic-version": "2023-06-01"},
            bare,
        )
        self._start_sidecar()
        if self.settings.litellm:
            self._start_litellm()
        else:
            self.skipped["litellm"] = "disabled (--no-litellm or --quick)"
        self._write_bodies()

    def _start_sidecar(self) -> None:
        build = self.workdir / "build"
        try:
            self.tokens = write_bench_build(build, self.upstream.url(), self.tools.url())
            self.sidecar_admin_port = free_port()
            sidecar = self._start(
                "sidecar",
                sidecar_command(build, self.workdir / "state", self.sidecar_admin_port),
                # A fresh audit key per run: the sidecar refuses to start without one.
                env={**PROVIDER_KEYS, AUDIT_KEY_ENV: secrets.token_hex(32)},
                cwd=REPO,
            )
        except Exception as exc:  # the sidecar may not run yet: measure the rest anyway
            self.skipped["sidecar"] = f"could not start: {exc}"
            return
        token = self.tokens["bench-native"]
        self.targets["sidecar"] = Target(
            "sidecar",
            sidecar.url(),
            {"Authorization": f"Bearer {token}"},
            {"Authorization": f"Bearer {token}", "anthropic-version": "2023-06-01"},
            sidecar,
        )

    def _start_litellm(self) -> None:
        executable = LITELLM_VENV / "bin" / "litellm"
        if not executable.exists():
            self.skipped["litellm"] = f"not installed ({executable.relative_to(REPO)} missing)"
            return
        config = self.workdir / "litellm.yaml"
        config.write_text(litellm_config(self.upstream.url()))
        env = {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # never fetch the price list from the network
            "LITELLM_LOG": "ERROR",
            "LITELLM_TELEMETRY": "False",
            **PROVIDER_KEYS,
        }
        try:
            server = self._start(
                "litellm",
                [
                    str(executable),
                    "--config",
                    str(config),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "{port}",
                    "--num_workers",
                    "1",
                ],
                env=env,
                cwd=self.workdir,
                ready_timeout_s=180,
            )
        except RuntimeError as exc:
            self.skipped["litellm"] = str(exc)
            return
        self.targets["litellm"] = Target(
            "litellm", server.url(), {"Authorization": "Bearer none"}, None, server
        )

    def _write_bodies(self) -> None:
        bodies = {
            "openai_json": workloads.openai_chat(PASS_MODEL),
            "openai_sse": workloads.openai_chat(PASS_MODEL, stream=True),
            "anthropic_json": workloads.anthropic_messages(ANTHROPIC_MODEL),
            # The Messages and Responses callers' own streams, relayed untouched: the same
            # caller's pass-through of the streamed directions (bench.ab).
            "anthropic_sse": workloads.anthropic_messages(ANTHROPIC_MODEL, stream=True),
            "responses_sse": workloads.responses_request(RESPONSES_MODEL, stream=True),
            TRANSLATED: workloads.anthropic_messages(TRANSLATED_MODEL),
            TRANSLATED_SSE: workloads.anthropic_messages(TRANSLATED_MODEL, stream=True),
            "slow_sse": workloads.openai_chat("gpt-bench-slow", stream=True),
            "gap_sse": workloads.openai_chat(f"{PASS_MODEL}-gap", stream=True),
        }
        bodies.update({name: make() for name, make in OTHER_DIRECTIONS.items()})
        for rounds in self.settings.rounds:
            bodies[f"mediated_r{rounds}"] = workloads.openai_chat(f"gpt-bench-r{rounds}")
        # Requests that are not retries of each other (bench.ab's *_distinct workloads).
        bodies["mediated_r1_distinct"] = workloads.openai_chat("gpt-bench-r1", distinct=True)
        for name, body in bodies.items():
            path = self.workdir / f"{name}.json"
            path.write_bytes(body)
            self.bodies[name] = path

    # --- measurement ------------------------------------------------------------------------

    def _route(self, target: Target, workload: str) -> tuple[str, dict[str, str]]:
        if workload.startswith("anthropic"):
            assert target.anthropic_headers is not None
            return target.base_url + "/v1/messages", target.anthropic_headers
        if workload.startswith("responses"):
            return target.base_url + "/v1/responses", target.openai_headers
        return target.base_url + "/v1/chat/completions", target.openai_headers

    def measure(
        self, target: Target, workload: str, concurrency: int, headers: dict | None = None
    ) -> dict:
        url, route_headers = self._route(target, workload)
        headers = headers or route_headers
        body = self.bodies[workload]
        self._settle(target)
        if self.settings.warmup_s:
            loadgen.run_wrk(
                url,
                concurrency=concurrency,
                duration_s=self.settings.warmup_s,
                headers=headers,
                body_file=body,
            )
        before = self._counters(target)
        cell = loadgen.run_wrk(
            url,
            concurrency=concurrency,
            duration_s=self.settings.duration_s,
            headers=headers,
            body_file=body,
        )
        cell.update(self._accounting(target, before, cell["requests"]))
        return cell

    def _settle(self, target: Target, max_wait_s: float = 90.0) -> None:
        """Wait until the proxy has drained work left by the previous cell (an overloaded proxy
        keeps serving requests its abandoned clients sent), so cells do not pollute each other."""
        if not target.process:
            return
        deadline = time.monotonic() + max_wait_s
        before = cpu_seconds(target.process.pid)
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = cpu_seconds(target.process.pid)
            if now - before < 0.05:  # under 10% of a core: idle apart from housekeeping
                return
            before = now
        log(f"  {target.name} still busy after {max_wait_s:.0f} s")

    def _counters(self, target: Target) -> dict[str, float]:
        self.upstream_stats.reset()
        self.tool_stats.reset()
        counters = {"upstream_cpu_s": cpu_seconds(self.upstream.pid)}
        if target.process:
            counters["proxy_cpu_s"] = cpu_seconds(target.process.pid)
        return counters

    def _accounting(
        self, target: Target, before: dict[str, float], requests: int
    ) -> dict[str, Any]:
        """CPU the proxy and the upstream spent per request, and connections the stubs accepted."""
        upstream = self.upstream_stats.stats()
        tools = self.tool_stats.stats()
        result: dict[str, Any] = {
            "upstream_cpu_ms_per_request": per_request(
                cpu_seconds(self.upstream.pid) - before["upstream_cpu_s"], requests
            ),
            "upstream_connections": upstream["connections"],
            "upstream_requests": upstream["requests"],
            "tool_connections": tools["connections"],
            "tool_requests": tools["requests"],
        }
        if target.process:
            spent = cpu_seconds(target.process.pid) - before["proxy_cpu_s"]
            result["proxy_cpu_s"] = spent
            result["proxy_cpu_ms_per_request"] = per_request(spent, requests)
        return result

    # --- scenarios --------------------------------------------------------------------------

    def throughput_matrix(self) -> dict[str, dict[str, dict[str, dict]]]:
        """Every target x workload x concurrency, measured with wrk."""
        matrix: dict[str, dict[str, dict[str, dict]]] = {}
        for name in TARGET_NAMES:
            target = self.targets.get(name)
            if not target:
                continue
            for workload in ("openai_json", "openai_sse", "anthropic_json"):
                if workload.startswith("anthropic") and target.anthropic_headers is None:
                    continue
                for concurrency in self.settings.concurrencies:
                    log(f"{name:8} {workload:15} c={concurrency}")
                    cell = self._safe(
                        lambda t=target, w=workload, c=concurrency: self.measure(t, w, c)
                    )
                    matrix.setdefault(name, {}).setdefault(workload, {})[str(concurrency)] = cell
        sidecar = self.targets.get("sidecar")
        for concurrency in self.settings.concurrencies if sidecar else ():
            # Translation is the sidecar's alone: compared with its own anthropic_json.
            for workload in (TRANSLATED, TRANSLATED_SSE):
                log(f"sidecar  {workload} c={concurrency}")
                cell = self._safe(lambda c=concurrency, w=workload: self.measure(sidecar, w, c))
                matrix["sidecar"].setdefault(workload, {})[str(concurrency)] = cell
        return matrix

    def streaming_ttfb(self) -> dict[str, dict[str, dict]]:
        """Time to first byte of 200-chunk streams, with a client that timestamps the first byte."""
        results: dict[str, dict[str, dict]] = {}
        for name in TARGET_NAMES:
            target = self.targets.get(name)
            if not target:
                continue
            url, headers = self._route(target, "openai_sse")
            body = self.bodies["openai_sse"].read_bytes()
            for concurrency in self.settings.ttfb_concurrencies:
                log(f"{name:8} ttfb            c={concurrency}")
                requests = self.settings.ttfb_requests(concurrency)
                processes = 1 if concurrency <= 16 else 2
                results.setdefault(name, {})[str(concurrency)] = self._safe(
                    lambda u=url, h=headers, b=body, c=concurrency, r=requests, p=processes: (
                        streamclient.run(
                            u,
                            b,
                            h,
                            concurrency=c,
                            requests=r,
                            processes=p,
                            max_seconds=TTFB_MAX_SECONDS,
                        )
                    )
                )
        return results

    def interleaved_c1(self) -> dict[str, Any]:
        """Concurrency-1 latency and TTFB with the targets interleaved request by request."""
        results: dict[str, Any] = {}
        json_rounds, sse_rounds = (20, 10) if self.settings.quick else (400, 200)
        for workload, rounds in (("openai_json", json_rounds), ("gap_sse", sse_rounds)):
            endpoints = {}
            for name in TARGET_NAMES:
                target = self.targets.get(name)
                # LiteLLM spends ~12 ms CPU per request, part of it after answering: in the
                # same rounds it would slow the others' requests. Its c=1 figures come from wrk.
                if not target or name == "litellm":
                    continue
                url, headers = self._route(target, workload)
                body = self.bodies[workload].read_bytes()
                endpoints[name] = interleaved.Endpoint(url, headers, body)
            log(f"interleaved c=1 {workload} x{rounds}: {', '.join(endpoints)}")
            results[workload] = self._safe(
                lambda e=endpoints, r=rounds: interleaved.run(e, rounds=r)
            )
        return results

    def mediated(self) -> dict[str, Any]:
        """The sidecar's tool loop: N scripted tool rounds per request, N in settings.rounds."""
        target = self.targets.get("sidecar")
        if not target:
            return {"skipped": self.skipped.get("sidecar", "sidecar not running")}
        headers = {"Authorization": f"Bearer {self.tokens['bench-mediated']}"}
        results: dict[str, Any] = {"rounds": {}}
        for rounds in self.settings.rounds:
            for concurrency in self.settings.concurrencies:
                log(f"sidecar  mediated r={rounds}    c={concurrency}")
                cell = self._safe(
                    lambda r=rounds, c=concurrency: self.measure(
                        target, f"mediated_r{r}", c, headers
                    )
                )
                results["rounds"].setdefault(str(rounds), {})[str(concurrency)] = cell
        # One round of a tool with side effects: the journal (fsynced) and Idempotency-Key.
        writer = {"Authorization": f"Bearer {self.tokens['bench-mediated-write']}"}
        for concurrency in self.settings.concurrencies:
            log(f"sidecar  mediated destructive r=1 c={concurrency}")
            cell = self._safe(lambda c=concurrency: self.measure(target, "mediated_r1", c, writer))
            results.setdefault("destructive_r1", {})[str(concurrency)] = cell
        log("direct   tool service    c=1")
        tool_url = self.tools.url("/lookup/round-1")
        results["direct_tool_c1"] = self._safe(
            lambda: loadgen.run_wrk(
                tool_url,
                concurrency=1,
                duration_s=self.settings.duration_s,
                headers={},
                body_file=None,
            )
        )
        return results

    def memory_under_streams(self) -> dict[str, Any]:
        """Peak RSS of the sidecar while N clients hold paced streams open at once."""
        target = self.targets.get("sidecar")
        if not target or not target.process:
            return {"skipped": self.skipped.get("sidecar", "sidecar not running")}
        clients = self.settings.stream_clients
        log(f"sidecar  {clients} concurrent paced streams (RSS)")
        pid = target.process.pid
        baseline = rss_bytes(pid)
        samples: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append(rss_bytes(pid))
                stop.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        url, headers = self._route(target, "openai_sse")
        try:
            run = self._safe(
                lambda: streamclient.run(
                    url,
                    self.bodies["slow_sse"].read_bytes(),
                    headers,
                    concurrency=clients,
                    requests=clients,
                    processes=2,
                )
            )
        finally:
            stop.set()
            sampler.join()
        return {
            "clients": clients,
            "completed_streams": run.get("requests"),
            "errors": run.get("errors"),
            "stream_seconds_p50": (run.get("latency") or {}).get("p50_ms", 0) / 1000,
            "rss_before_mb": baseline / 2**20,
            "rss_peak_mb": max(samples, default=baseline) / 2**20,
        }

    def sidecar_connection_metrics(self) -> dict[str, Any]:
        """The sidecar's own count of new vs reused outbound connections (claw_connections)."""
        target = self.targets.get("sidecar")
        if not target or not target.process:
            return {"skipped": self.skipped.get("sidecar", "sidecar not running")}
        # /metrics is on the operator listener, not on the agents' port.
        connection = http.client.HTTPConnection("127.0.0.1", self.sidecar_admin_port, timeout=10)
        try:
            connection.request("GET", "/metrics")
            text = connection.getresponse().read().decode()
        finally:
            connection.close()
        counts: dict[str, dict[str, float]] = {}
        for line in text.splitlines():
            if line.startswith("claw_connections_total{"):
                labels, _, value = line.partition("} ")
                fields = dict(
                    part.split("=", 1)
                    for part in labels.removeprefix("claw_connections_total{").split(",")
                )
                pool, kind = fields["pool"].strip('"'), fields["kind"].strip('"')
                counts.setdefault(pool, {})[kind] = float(value)
        return counts

    def compile_time(self) -> dict[str, Any]:
        agents, services, tools = self.settings.compile_size
        clawc = Path(sys.executable).parent / "clawc"
        if not clawc.exists():
            return {"skipped": "clawc is not installed in this virtualenv"}
        log(f"clawc    compile {agents} agents x {services} services x {tools} tools")
        pod = write_pod(self.workdir / "bigpod", agents, services, tools)
        out = self.workdir / "bigpod-build"
        timings, cpu = [], []
        for _ in range(1 if self.settings.quick else 3):
            started = time.perf_counter()
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            result = subprocess.run(
                [str(clawc), "compile", str(pod), "-o", str(out)],
                capture_output=True,
                text=True,
                check=False,
            )
            timings.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime)
            if result.returncode != 0:
                return {
                    "error": (result.stderr or result.stdout)[-2000:],
                    "exit": result.returncode,
                }
        return {
            "agents": agents,
            "services": services,
            "tools_per_service": tools,
            "seconds_first": timings[0],
            "seconds_best": min(timings),
            "runs": len(timings),
            "cpu_seconds_best": min(cpu),
        }

    def _safe(self, measure: Callable[[], dict]) -> dict:
        try:
            return measure()
        except Exception as exc:  # one broken scenario must not lose the whole run
            log(f"  failed: {exc}")
            return {"error": str(exc)[-2000:]}


# --- build, configs ----------------------------------------------------------------------------


def write_bench_build(root: Path, upstream_url: str, tools_url: str) -> dict[str, str]:
    """A pass-through (native) agent, a mediated agent with one read-only lookup tool and one
    whose lookup tool has side effects (no hints: journaled, with an Idempotency-Key)."""
    from tests.support.builds import AgentSpec, http_tool, providers_for, write_build

    lookup = http_tool(
        "bench-tools",
        "lookup",
        tools_url,
        method="GET",
        path="/lookup/{q}",
        schema={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        annotations={"readOnlyHint": True},
        description=workloads.TOOL_SCHEMA_NOTE,
    )
    # Generous budgets: the bench measures cost, not the budget logic.
    policy = ToolPolicy(max_rounds=16, timeout_per_tool_ms=30000, total_timeout_ms=120000)
    # model_copy runs no validator: the effect of no hints (MCP's defaults) is stated with them.
    write = lookup.model_copy(update={"annotations": {}, "effect": effect_of({})})
    agents = [
        AgentSpec("bench-native", mode="native"),
        AgentSpec("bench-mediated", tools=[lookup], policy=policy),
        AgentSpec("bench-mediated-write", tools=[write], policy=policy),
    ]
    providers = providers_for(upstream_url + "/v1", upstream_url)
    # OpenAI-API providers that serve one protocol only (a local Chat server, a Responses-only
    # model): their callers of the other protocols are translated.
    for name, protocol, model in (
        ("local", "chat", TRANSLATED_MODEL),
        ("responses-only", "responses", RESPONSES_MODEL),
    ):
        providers[name] = Provider(
            api="openai",
            protocols=[protocol],
            base_url=upstream_url + "/v1",
            key_env="OPENAI_API_KEY",
            models=[model],
        )
    return write_build(root, agents, providers, pod="bench")


def sidecar_command(build: Path, state_dir: Path, admin_port: int) -> list[str]:
    """``python -m clawpod.sidecar`` on a build, listening on the port ``_start`` fills in,
    its operator listener (``/metrics``) on ``admin_port``."""
    return [
        sys.executable,
        "-m",
        "clawpod.sidecar",
        "--build",
        str(build),
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--admin-port",
        str(admin_port),
        "--state-dir",
        str(state_dir),
    ]


def litellm_config(upstream_url: str) -> str:
    return (
        "model_list:\n"
        f"  - model_name: {PASS_MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{PASS_MODEL}\n"
        f"      api_base: {upstream_url}/v1\n"
        "      api_key: os.environ/OPENAI_API_KEY\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  drop_params: true\n"
    )


def write_pod(root: Path, agents: int, services: int, tools: int) -> Path:
    from tests.support.bigpod import write_big_pod  # the compiler tests' own generator

    return write_big_pod(root, agents, services, tools)


# --- derived figures ---------------------------------------------------------------------------


def per_request(seconds: float, requests: int) -> float | None:
    return seconds * 1000 / requests if requests else None


def _cell(matrix: dict, target: str, workload: str, concurrency: int) -> dict:
    cell = matrix.get(target, {}).get(workload, {}).get(str(concurrency), {})
    return cell if "error" not in cell else {}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _diff(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def _aggregate_cpu(cells: list[dict]) -> float | None:
    spent = sum(c.get("proxy_cpu_s", 0.0) for c in cells if "proxy_cpu_s" in c)
    requests = sum(c["requests"] for c in cells if "proxy_cpu_s" in c)
    return per_request(spent, requests)


def _slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    num = sum((x - mean_x) * (y - mean_y) for x, y in points)
    den = sum((x - mean_x) ** 2 for x, _ in points)
    return num / den


def derive(results: dict, settings: Settings) -> dict[str, Any]:
    matrix = results["throughput"]
    derived: dict[str, Any] = {
        "added_latency_ms": {},
        "cpu_ms_per_request": {},
        "ttfb_added_ms": {},
    }
    for proxy in ("bare", "sidecar", "litellm"):
        for workload in ("openai_json", "openai_sse", "anthropic_json"):
            for concurrency in settings.concurrencies:
                mine = _cell(matrix, proxy, workload, concurrency).get("latency", {})
                direct = _cell(matrix, "direct", workload, concurrency).get("latency", {})
                if mine and direct:
                    derived["added_latency_ms"].setdefault(proxy, {}).setdefault(workload, {})[
                        str(concurrency)
                    ] = {
                        q: _diff(mine.get(q), direct.get(q)) for q in ("p50_ms", "p90_ms", "p99_ms")
                    }
            cells = list(matrix.get(proxy, {}).get(workload, {}).values())
            cpu = _aggregate_cpu([c for c in cells if "error" not in c])
            if cpu is not None:
                derived["cpu_ms_per_request"].setdefault(proxy, {})[workload] = cpu
        for concurrency, run in results["ttfb"].get(proxy, {}).items():
            direct = results["ttfb"].get("direct", {}).get(concurrency, {})
            if "ttfb" in run and "ttfb" in direct:
                derived["ttfb_added_ms"].setdefault(proxy, {})[concurrency] = {
                    q: _diff(run["ttfb"][q], direct["ttfb"][q]) for q in ("p50_ms", "p99_ms")
                }
    measured = results.get("interleaved_c1", {})
    derived["interleaved_c1_added_ms"] = {
        "latency_openai_json": interleaved.added(measured.get("openai_json", {})),
        "ttfb_openai_sse": interleaved.added(measured.get("gap_sse", {}), key="ttfb"),
    }
    translated = matrix.get("sidecar", {}).get(TRANSLATED, {}).values()
    translated_cpu = _aggregate_cpu([c for c in translated if "error" not in c])
    derived["translation_cpu_ms_over_passthrough"] = _diff(
        translated_cpu, derived["cpu_ms_per_request"].get("sidecar", {}).get("anthropic_json")
    )
    streamed = matrix.get("sidecar", {}).get(TRANSLATED_SSE, {}).values()
    derived["stream_translation_cpu_ms_over_passthrough"] = _diff(
        _aggregate_cpu([c for c in streamed if "error" not in c]),
        derived["cpu_ms_per_request"].get("sidecar", {}).get("openai_sse"),
    )
    derived["mediated"] = derive_mediated(results, settings)
    derived["keepalive_reuse"] = derive_reuse(results)
    return derived


def derive_mediated(results: dict, settings: Settings) -> dict[str, Any]:
    mediated = results["mediated"].get("rounds")
    if not mediated:
        return {}
    cpu_points, latency_points = [], []
    cpu_by_rounds = {}
    for rounds, cells in mediated.items():
        good = [c for c in cells.values() if "error" not in c and not c.get("errors")]
        cpu = _aggregate_cpu(good)
        if cpu is not None:
            cpu_by_rounds[rounds] = cpu
            cpu_points.append((int(rounds), cpu))
        single = cells.get("1", {})
        if "latency" in single and not single.get("errors"):
            latency_points.append((int(rounds), single["latency"]["p50_ms"]))
    direct_model = _cell(results["throughput"], "direct", "openai_json", 1).get("latency", {})
    direct_tool = results["mediated"].get("direct_tool_c1", {}).get("latency", {})
    latency_slope = _slope(latency_points)
    round_floor = (
        direct_model["p50_ms"] + direct_tool["p50_ms"] if direct_model and direct_tool else None
    )
    destructive = results["mediated"].get("destructive_r1", {}).values()
    return {
        "cpu_ms_per_request_by_rounds": cpu_by_rounds,
        "cpu_ms_per_request_destructive_r1": _aggregate_cpu(
            [c for c in destructive if "error" not in c and not c.get("errors")]
        ),
        "cpu_ms_per_round": _slope(cpu_points),
        "latency_p50_ms_per_round_c1": latency_slope,
        "direct_model_plus_tool_p50_ms_c1": round_floor,
        "added_latency_p50_ms_per_round_c1": _diff(latency_slope, round_floor),
    }


def derive_reuse(results: dict) -> dict[str, Any]:
    """Share of upstream/tool requests that did not need a new TCP connection."""
    reuse: dict[str, Any] = {}
    cells_by_proxy: dict[str, list[dict]] = {}
    for proxy, workloads_ in results["throughput"].items():
        if proxy == "direct":
            continue
        for cells in workloads_.values():
            cells_by_proxy.setdefault(proxy, []).extend(cells.values())
    for cells in results["mediated"].get("rounds", {}).values():
        cells_by_proxy.setdefault("sidecar", []).extend(cells.values())
    for proxy, cells in cells_by_proxy.items():
        good = [c for c in cells if "error" not in c]
        entry = {}
        for kind in ("upstream", "tool"):
            requests = sum(c[f"{kind}_requests"] for c in good)
            connections = sum(c[f"{kind}_connections"] for c in good)
            if requests:
                entry[kind] = {
                    "requests": requests,
                    "new_connections": connections,
                    "reused_fraction": max(0.0, 1 - connections / requests),
                }
        reuse[proxy] = entry
    return reuse


def ratios(results: dict, settings: Settings) -> list[dict[str, Any]]:
    matrix = results["throughput"]
    rows = []
    for workload in ("openai_json", "openai_sse", "anthropic_json"):
        for concurrency in settings.concurrencies:
            rps = {
                name: _cell(matrix, name, workload, concurrency).get("throughput_rps")
                for name in TARGET_NAMES
            }
            cpu = {
                name: _cell(matrix, name, workload, concurrency).get("proxy_cpu_ms_per_request")
                for name in ("bare", "sidecar", "litellm")
            }
            if not any(rps.values()):
                continue
            added = results["derived"]["added_latency_ms"].get("sidecar", {}).get(workload, {})
            added = added.get(str(concurrency), {})
            rows.append(
                {
                    "workload": workload,
                    "concurrency": concurrency,
                    "rps": rps,
                    "sidecar_over_direct": _ratio(rps["sidecar"], rps["direct"]),
                    "sidecar_over_bare": _ratio(rps["sidecar"], rps["bare"]),
                    "litellm_over_sidecar": _ratio(rps["litellm"], rps["sidecar"]),
                    "sidecar_added_p50_ms": added.get("p50_ms"),
                    "sidecar_added_p99_ms": added.get("p99_ms"),
                    "cpu_ms_per_request": cpu,
                }
            )
    return rows


def check_targets(results: dict) -> list[dict[str, Any]]:
    """docs/contract.md §6, one line per target: value, limit, met or not (None = not measured)."""
    derived = results["derived"]
    added = derived["interleaved_c1_added_ms"]["latency_openai_json"].get("sidecar", {})
    cpu = derived["cpu_ms_per_request"]
    sidecar_cpu = cpu.get("sidecar", {}).get("openai_json")
    bare_cpu = cpu.get("bare", {}).get("openai_json")
    ttfb = derived["interleaved_c1_added_ms"]["ttfb_openai_sse"].get("sidecar", {})
    reuse = derived["keepalive_reuse"].get("sidecar", {})
    memory = results["memory"]
    compiled = results["compile"]
    rows_by_key = {(r["workload"], r["concurrency"]): r for r in results["ratios"]}
    compile_size = "x".join(
        str(compiled.get(k, "?")) for k in ("agents", "services", "tools_per_service")
    )

    def row(concurrency: int, key: str) -> float | None:
        found = rows_by_key.get(("openai_json", concurrency), {})
        if key.startswith("rps_"):
            return found.get("rps", {}).get(key[4:])
        return found.get(key)

    def inverse(value: float | None) -> float | None:
        return 1 / value if value else None

    by_rounds = derived["mediated"].get("cpu_ms_per_request_by_rounds", {})
    over_pass = _diff(by_rounds.get("0"), sidecar_cpu)

    checks = [
        ("pass-through added p50 at c=1 (ms)", added.get("p50_ms"), "<=", 0.5),
        ("pass-through added p99 at c=1 (ms)", added.get("p99_ms"), "<=", 1.5),
        ("sidecar CPU per pass-through request (ms)", sidecar_cpu, "<=", 0.4),
        (
            "sidecar CPU per mediated round (ms)",
            derived["mediated"].get("cpu_ms_per_round"),
            "<=",
            1.5,
        ),
        ("sidecar CPU / bare forwarder CPU", _ratio(sidecar_cpu, bare_cpu), "<=", 1.3),
        ("throughput sidecar/direct at c=16", row(16, "sidecar_over_direct"), ">=", 0.4),
        ("throughput sidecar/direct at c=64", row(64, "sidecar_over_direct"), ">=", 0.4),
        ("throughput sidecar/LiteLLM at c=16", inverse(row(16, "litellm_over_sidecar")), ">=", 3.0),
        ("throughput sidecar/LiteLLM at c=64", inverse(row(64, "litellm_over_sidecar")), ">=", 3.0),
        ("streaming TTFB added p50 at c=1 (ms)", ttfb.get("p50_ms"), "<=", 1.0),
        (
            "upstream requests on reused connections",
            reuse.get("upstream", {}).get("reused_fraction"),
            ">=",
            0.99,
        ),
        (
            "tool requests on reused connections",
            reuse.get("tool", {}).get("reused_fraction"),
            ">=",
            0.99,
        ),
        (
            f"RSS with {memory.get('clients', '?')} streams (MB)",
            memory.get("rss_peak_mb"),
            "<=",
            150.0,
        ),
        (f"compile {compile_size} wall (s)", compiled.get("seconds_best"), "<=", 2.0),
        (f"compile {compile_size} CPU (s)", compiled.get("cpu_seconds_best"), "<=", 2.0),
        # SPEC §19: mediated requests measured whole (CPU over requests), not as a slope.
        (
            "sidecar CPU per mediated request, 0 rounds, over pass-through (ms)",
            over_pass,
            "<=",
            0.15,
        ),
        (
            "sidecar CPU per mediated request, 1 read-only round (ms)",
            by_rounds.get("1"),
            "<=",
            0.45,
        ),
        (
            "sidecar CPU per mediated request, 1 destructive round (ms)",
            derived["mediated"].get("cpu_ms_per_request_destructive_r1"),
            "<=",
            0.6,
        ),
        (
            "translated CPU over pass-through (ms)",
            derived.get("translation_cpu_ms_over_passthrough"),
            "<=",
            0.05,
        ),
    ]
    # What the bare aiohttp forwarder scores on the same target: the floor of a Python hop.
    bare_added = derived["interleaved_c1_added_ms"]["latency_openai_json"].get("bare", {})
    bare_ttfb = derived["interleaved_c1_added_ms"]["ttfb_openai_sse"].get("bare", {})
    bare_reuse = derived["keepalive_reuse"].get("bare", {}).get("upstream", {})
    floors = {
        0: bare_added.get("p50_ms"),
        1: bare_added.get("p99_ms"),
        2: bare_cpu,
        5: _ratio(row(16, "rps_bare"), row(16, "rps_direct")),
        6: _ratio(row(64, "rps_bare"), row(64, "rps_direct")),
        9: bare_ttfb.get("p50_ms"),
        10: bare_reuse.get("reused_fraction"),
    }
    out = []
    for index, (name, value, op, limit) in enumerate(checks):
        met = None if value is None else (value <= limit if op == "<=" else value >= limit)
        out.append(
            {
                "target": name,
                "measured": value,
                "limit": f"{op} {limit}",
                "met": met,
                "bare_forwarder": floors.get(index),
            }
        )
    return out


# --- output ------------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[bench {datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_table(results: dict) -> str:
    lines = [
        "workload        c    direct rps  bare rps  sidecar rps  litellm rps  sc/direct  sc/bare"
        "  litellm/sc  sc +p50 ms  sc +p99 ms  CPU ms/req bare  sidecar  litellm",
    ]
    for r in results["ratios"]:
        rps, cpu = r["rps"], r["cpu_ms_per_request"]
        lines.append(
            f"{r['workload']:15} {r['concurrency']:<4} {_fmt(rps['direct'], 0):>10}"
            f" {_fmt(rps['bare'], 0):>9}"
            f" {_fmt(rps['sidecar'], 0):>12} {_fmt(rps['litellm'], 0):>12}"
            f" {_fmt(r['sidecar_over_direct']):>10} {_fmt(r['sidecar_over_bare']):>8}"
            f" {_fmt(r['litellm_over_sidecar']):>11} {_fmt(r['sidecar_added_p50_ms']):>11}"
            f" {_fmt(r['sidecar_added_p99_ms']):>11} {_fmt(cpu['bare'], 3):>16}"
            f" {_fmt(cpu['sidecar'], 3):>8} {_fmt(cpu['litellm'], 3):>8}"
        )
    mediated = results["derived"]["mediated"]
    if mediated:
        lines.append("")
        lines.append(
            "mediated: sidecar CPU ms/request by rounds "
            + ", ".join(
                f"r{k}={_fmt(v, 3)}" for k, v in mediated["cpu_ms_per_request_by_rounds"].items()
            )
            + f"; one destructive round {_fmt(mediated['cpu_ms_per_request_destructive_r1'], 3)}"
            + f"; per round {_fmt(mediated['cpu_ms_per_round'], 3)} ms CPU,"
            f" +{_fmt(mediated['added_latency_p50_ms_per_round_c1'], 3)} ms p50 latency at c=1"
        )
    for label, key in (("latency", "latency_openai_json"), ("stream TTFB", "ttfb_openai_sse")):
        rows = results["derived"]["interleaved_c1_added_ms"][key]
        if rows:
            lines.append(
                f"interleaved c=1 added {label} p50/p99 ms: "
                + "; ".join(f"{n} {_fmt(v['p50_ms'])}/{_fmt(v['p99_ms'])}" for n, v in rows.items())
            )
    ttfb = results["derived"]["ttfb_added_ms"]
    if ttfb:
        lines.append(
            "streaming TTFB added p50/p99 ms: "
            + "; ".join(
                f"{proxy} "
                + " ".join(f"c{c}={_fmt(v['p50_ms'])}/{_fmt(v['p99_ms'])}" for c, v in runs.items())
                for proxy, runs in ttfb.items()
            )
        )
    reported = results.get("sidecar_reported_connections") or {}
    if reported and "skipped" not in reported and "error" not in reported:
        lines.append(
            "sidecar /metrics connections: "
            + "; ".join(
                f"{pool} new={kinds.get('new', 0):.0f} reused={kinds.get('reused', 0):.0f}"
                for pool, kinds in sorted(reported.items())
            )
        )
    lines.append("")
    lines.append(
        "SPEC §6 target                                  measured      limit  met   bare fwd"
    )
    for check in results["targets"]:
        met = {True: "yes", False: "NO", None: "n/a"}[check["met"]]
        lines.append(
            f"{check['target']:46} {_fmt(check['measured'], 3):>10} {check['limit']:>10}"
            f"  {met:4} {_fmt(check.get('bare_forwarder'), 3):>9}"
        )
    return "\n".join(lines)


def render_markdown(results: dict) -> str:
    """The README's results tables, from one run's JSON (python -m bench.run --markdown FILE)."""
    out = [
        "| workload | c | direct rps | bare rps | sidecar rps | LiteLLM rps | sidecar/direct"
        " | sidecar/bare | LiteLLM/sidecar | sidecar added p50 / p99 ms | CPU ms/req bare"
        " / sidecar / LiteLLM |",
        "|" + "---|" * 11,
    ]
    for r in results["ratios"]:
        rps, cpu = r["rps"], r["cpu_ms_per_request"]
        out.append(
            f"| {r['workload']} | {r['concurrency']} | {_fmt(rps['direct'], 0)}"
            f" | {_fmt(rps['bare'], 0)} | {_fmt(rps['sidecar'], 0)} | {_fmt(rps['litellm'], 0)}"
            f" | {_fmt(r['sidecar_over_direct'])} | {_fmt(r['sidecar_over_bare'])}"
            f" | {_fmt(r['litellm_over_sidecar'], 3)}"
            f" | {_fmt(r['sidecar_added_p50_ms'])} / {_fmt(r['sidecar_added_p99_ms'])}"
            f" | {_fmt(cpu['bare'], 3)} / {_fmt(cpu['sidecar'], 3)} / {_fmt(cpu['litellm'], 3)} |"
        )
    out += [
        "",
        "| SPEC §6 target | sidecar | limit | met | bare forwarder (floor) |",
        "|---|---|---|---|---|",
    ]
    for check in results["targets"]:
        met = {True: "yes", False: "**no**", None: "n/a"}[check["met"]]
        out.append(
            f"| {check['target']} | {_fmt(check['measured'], 3)} | {check['limit']} | {met}"
            f" | {_fmt(check.get('bare_forwarder'), 3)} |"
        )
    return "\n".join(out)


def versions() -> dict[str, str | None]:
    def version(package: str) -> str | None:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(package)
        return None

    litellm = None
    pip = LITELLM_VENV / "bin" / "python"
    if pip.exists():
        probe = subprocess.run(
            [str(pip), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
            capture_output=True,
            text=True,
            check=False,
        )
        litellm = probe.stdout.strip() or None
    return {
        "python": platform.python_version(),
        "aiohttp": version("aiohttp"),
        "uvloop": version("uvloop"),
        "orjson": version("orjson"),
        "litellm": litellm,
        "wrk": loadgen.wrk_version(),
    }


def git_commit() -> str | None:
    probe = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return probe.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="clawpod benchmark (see bench/README.md)")
    parser.add_argument("--quick", action="store_true", help="tiny load, for a smoke test")
    parser.add_argument("--duration", type=int, default=5, help="seconds per measurement")
    parser.add_argument("--no-litellm", dest="litellm", action="store_false")
    parser.add_argument("--output", type=Path, help="JSON file (default bench/results/<time>.json)")
    parser.add_argument("--keep-workdir", action="store_true")
    parser.add_argument("--markdown", type=Path, help="print a finished run's tables as Markdown")
    args = parser.parse_args(argv)
    if args.markdown:
        print(render_markdown(json.loads(args.markdown.read_text())))
        return 0
    if args.quick:
        args.litellm = False  # installing and starting LiteLLM dwarfs a smoke run
    settings = Settings.from_args(args)
    started = datetime.now(UTC)
    output = args.output or BENCH_DIR / "results" / f"{started:%Y%m%dT%H%M%SZ}.json"
    workdir = Path(tempfile.mkdtemp(prefix="clawpod-bench-"))
    bench = Bench(settings, workdir)
    results: dict[str, Any] = {
        "meta": {
            "started": started.isoformat(),
            "quick": settings.quick,
            "cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
            "settings": settings.__dict__,
            "versions": versions(),
            "commit": git_commit(),
            "load_generator": "wrk (1 thread, Lua POST body) for latency/throughput; "
            "bench/streamclient.py (aiohttp, separate processes) for streaming TTFB and RSS",
        }
    }
    try:
        bench.start()
        results["interleaved_c1"] = bench.interleaved_c1()
        results["throughput"] = bench.throughput_matrix()
        results["ttfb"] = bench.streaming_ttfb()
        results["mediated"] = bench.mediated()
        results["memory"] = bench.memory_under_streams()
        results["sidecar_reported_connections"] = bench._safe(bench.sidecar_connection_metrics)
    finally:
        bench.stop_all()
    results["compile"] = bench._safe(bench.compile_time)
    results["skipped"] = bench.skipped
    results["derived"] = derive(results, settings)
    results["ratios"] = ratios(results, settings)
    results["targets"] = check_targets(results)
    results["meta"]["finished"] = datetime.now(UTC).isoformat()
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(render_table(results))
    for name, reason in bench.skipped.items():
        print(f"skipped {name}: {reason}")
    print(f"results: {output}")
    if args.keep_workdir:
        print(f"workdir: {workdir}")
    else:
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
