"""The example pod as a Swarm stack (SPEC §13.3), and the engine's swarm it runs on.

:class:`SwarmEngine` makes the provisioned engine a single-node swarm (``docker swarm init``,
left again only if this session made it). :class:`Stack` compiles a test copy of the example
with ``--target swarm``, adds an override (prebuilt images, the scripted upstream on
``claw-egress`` only, probe-ready agents), creates the Swarm secrets, labels the node that keeps
the sidecar's state and deploys it with ``docker stack deploy``; it reuses the compose tests'
probes by finding each service's running task container.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker
import yaml
from docker.models.containers import Container

from clawpod.compiler.output.swarm import secret_name, state_label
from tests.docker.pod import (
    CREDENTIAL_ENVS,
    MEDIATED_AGENT,
    NATIVE_AGENT,
    SIDECAR,
    TOOL_SERVICES,
    UPSTREAM,
    Pod,
    PodFiles,
    _test_pod,
)

IMAGES = {
    role: f"clawpod-swarm/{role}:session"
    for role in ("sidecar", "upstream", "agent", "trading-api", "market-news", "research-mcp")
}
OVERRIDE = {
    "services": {
        UPSTREAM: {
            "image": IMAGES["upstream"],
            "environment": {
                "EXPECTED_API_KEY": "${OPENAI_API_KEY}",
                "TOOL_MATCH": "get_market_context",
            },
            "networks": ["claw-egress"],
            "deploy": {"endpoint_mode": "dnsrr"},
        },
        **{
            name: {"image": IMAGES[name]} for name in ("trading-api", "market-news", "research-mcp")
        },
        MEDIATED_AGENT: {"image": IMAGES["agent"]},
        NATIVE_AGENT: {"image": IMAGES["agent"]},
    }
}
# A second scripted model for the crash test: it orders one share, then answers slowly once.
ORDERS_UPSTREAM = "fake-llm-orders"
ORDERS_MODEL = "order-desk"
ORDER = {"symbol": "NVDA", "side": "buy", "quantity": 1}
ORDERS_DELAY_S = 30  # the window in which the test kills the sidecar; never waited out
OVERRIDE["services"][ORDERS_UPSTREAM] = {
    "image": IMAGES["upstream"],
    "environment": {
        "EXPECTED_API_KEY": "${OPENAI_API_KEY}",
        "TOOL_MATCH": "execute_trade",
        "TOOL_ARGUMENTS": json.dumps(ORDER),
        "ANSWER_DELAY_S": str(ORDERS_DELAY_S),
    },
    "networks": ["claw-egress"],
    "deploy": {"endpoint_mode": "dnsrr"},
}
STACK_GUARD_S = 180
GWBRIDGE = "docker_gwbridge"  # how long a stack may take to come up: a deadlock guard, not a timing


def docker_cli(*args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, check=False, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout.strip()


class SwarmEngine:
    def __init__(self) -> None:
        self.initialised_here = False
        self.had_gateway_bridge = True

    def join(self) -> str:
        """Make sure the engine is a swarm manager; returns this node's id."""
        state = docker_cli("info", "--format", "{{.Swarm.LocalNodeState}}")
        if state != "active":
            self.had_gateway_bridge = bool(
                docker_cli("network", "ls", "-q", "-f", f"name={GWBRIDGE}")
            )
            docker_cli("swarm", "init", "--advertise-addr", "127.0.0.1")
            self.initialised_here = True
        return docker_cli("info", "--format", "{{.Swarm.NodeID}}")

    def leave(self) -> None:
        if self.initialised_here:
            docker_cli("swarm", "leave", "--force")
            if not self.had_gateway_bridge:  # swarm init made it; leaving does not remove it
                docker_cli("network", "rm", GWBRIDGE, check=False)


def compile_swarm(pod_file: Path, out: Path) -> str:
    """``clawc compile --target swarm`` of ``pod_file`` into ``out`` with the suite's sidecar
    image, as an operator runs it; what it warned."""
    clawc = Path(sys.executable).parent / "clawc"
    command = [str(clawc), "compile", str(pod_file), "-o", str(out), "--target", "swarm"]
    result = subprocess.run(
        [*command, "--sidecar-image", IMAGES["sidecar"]], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise AssertionError(f"clawc compile failed:\n{result.stdout}{result.stderr}")
    return result.stderr


class Stack(Pod):
    """A deployed stack; the compose tests' probes run in its tasks' containers."""

    def __init__(self, directory: Path, repo: Path, node: str) -> None:
        project = f"clawswarm{secrets.token_hex(3)}"
        pod_file = directory / project / "pod.yml"
        pod_file.parent.mkdir(parents=True)
        example = repo / "compose" / "examples" / "trading-desk" / "pod.yml"
        pod_file.write_text(yaml.safe_dump(_swarm_test_pod(example, project, pod_file.parent)))
        out = directory / "build"
        self.warnings = compile_swarm(pod_file, out)
        (out / "stack.e2e.yml").write_text(yaml.safe_dump({"version": "3.8", **OVERRIDE}))
        credentials = {
            name: f"e2e-{name.lower()}-{secrets.token_hex(12)}" for name in CREDENTIAL_ENVS
        }
        self.files = PodFiles(project=project, out=out, credentials=credentials)
        self.client = docker.from_env()
        self.node = node

    @property
    def project(self) -> str:
        return self.files.project

    def deploy(self) -> None:
        for name, value in self.files.credentials.items():
            subprocess.run(
                ["docker", "secret", "create", secret_name(self.project, name), "-"],
                input=value, capture_output=True, text=True, check=False,
            )  # fmt: skip
        docker_cli("node", "update", "--label-add", f"{state_label(self.project)}=true", self.node)
        env = {**_environ(), **self.files.credentials}
        docker_cli(
            "stack", "deploy", "--resolve-image", "never", "-c", str(self.files.out / "stack.yml"),
            "-c", str(self.files.out / "stack.e2e.yml"), self.project, env=env,
        )  # fmt: skip
        # The upstream has a health check; the tool services do not, and a mediated call sent
        # before its tool service's task runs finds nobody to answer it.
        for service in (SIDECAR, UPSTREAM):
            self.wait_healthy(service, STACK_GUARD_S)
        for service in (MEDIATED_AGENT, NATIVE_AGENT, *TOOL_SERVICES):
            self.wait_running(service, STACK_GUARD_S)
        # A running task's name reaches Swarm's DNS a moment later: a call sent before it does
        # finds a host name that does not resolve (seen once in CI).
        for service in TOOL_SERVICES:
            self.wait_resolvable(service, STACK_GUARD_S)

    def remove(self) -> list[str]:
        """``docker stack rm``, then what is left of the stack once its tasks are gone."""
        docker_cli("stack", "rm", self.project, check=False)
        deadline = time.monotonic() + STACK_GUARD_S
        label = f"com.docker.stack.namespace={self.project}"
        left: list[str] = []
        while time.monotonic() < deadline:
            left = [
                *docker_cli("service", "ls", "-q", "--filter", f"label={label}").split(),
                *docker_cli("network", "ls", "-q", "--filter", f"label={label}").split(),
                *docker_cli("config", "ls", "-q", "--filter", f"label={label}").split(),
                *docker_cli("ps", "-aq", "--filter", f"label={label}").split(),
            ]
            if not left:
                break
            time.sleep(1)
        return left

    def cleanup(self) -> None:
        """What ``docker stack rm`` leaves by design: external secrets, the volume, the label."""
        for name in self.files.credentials:
            docker_cli("secret", "rm", secret_name(self.project, name), check=False)
        docker_cli(
            "node", "update", "--label-rm", state_label(self.project), self.node, check=False
        )
        deadline = time.monotonic() + 60
        while docker_cli("volume", "rm", f"{self.project}_claw-state", check=False) == "":
            if not docker_cli("volume", "ls", "-q", "--filter", f"name={self.project}_"):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(1)

    # -- the compose tests' helpers, on swarm tasks -------------------------------------------

    def container(self, service: str) -> Container:
        found = self.client.containers.list(
            filters={"label": f"com.docker.swarm.service.name={self.project}_{service}"}
        )
        if len(found) != 1:
            raise AssertionError(f"expected one running task of {service}, found {len(found)}")
        return found[0]

    def wait_running(self, service: str, timeout_s: float) -> Container:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                return self.container(service)
            except AssertionError:
                time.sleep(0.5)
        raise AssertionError(f"{service} has no running task after {timeout_s}s:\n{self._logs()}")

    def wait_resolvable(self, service: str, timeout_s: float) -> None:
        """Until ``service``'s name resolves where the sidecar looks it up, in its task."""
        lookup = ["python", "-c", f"import socket; socket.getaddrinfo({service!r}, None)"]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.container(SIDECAR).exec_run(lookup).exit_code == 0:
                return
            time.sleep(0.5)
        raise AssertionError(f"{service} does not resolve after {timeout_s}s:\n{self._logs()}")

    def wait_healthy(self, service: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                state = self.container(service).attrs["State"]
            except AssertionError:
                state = {}
            if state.get("Health", {}).get("Status") == "healthy":
                return
            time.sleep(0.5)
        raise AssertionError(f"{service} not healthy after {timeout_s}s:\n{self._logs()}")

    def _logs(self) -> str:
        tasks = docker_cli("stack", "ps", "--no-trunc", self.project, check=False)
        sidecar = subprocess.run(
            ["docker", "service", "logs", "--raw", f"{self.project}_{SIDECAR}"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
        return f"{tasks}\n{sidecar.stdout[-4000:]}{sidecar.stderr[-4000:]}"

    def trades(self) -> list[dict[str, Any]]:
        """The orders the trading service has recorded, asked from inside its own task."""
        script = (
            "import os, urllib.request\n"
            "request = urllib.request.Request('http://127.0.0.1:4000/api/v1/trades?limit=100',"
            " headers={'Authorization': 'Bearer ' + os.environ['TRADING_RW_TOKEN']})\n"
            "print(urllib.request.urlopen(request, timeout=10).read().decode())\n"
        )
        code, output = self.exec("trading-api", "python", "-c", script)
        if code != 0:
            raise AssertionError(f"trades: {output}")
        return json.loads(output)["trades"]

    def upstream_log(self, service: str) -> list[dict[str, Any]]:
        logs = self.container(service).logs(stdout=True, stderr=False).decode()
        return [json.loads(line) for line in logs.splitlines() if line.startswith("{")]

    def operator(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Call the operator API from inside the sidecar's task (the claw-admin network)."""
        script = (
            "import json, sys, urllib.request\n"
            "body = sys.argv[3].encode() if sys.argv[3] else None\n"
            "request = urllib.request.Request('http://claw-sidecar-admin:9090' + sys.argv[2],"
            " data=body, method=sys.argv[1], headers={'Authorization': 'Bearer ' + "
            "open('/run/secrets/CLAW_OPERATOR_TOKEN').read().strip(), "
            "'Content-Type': 'application/json'})\n"
            "print(urllib.request.urlopen(request, timeout=10).read().decode())\n"
        )
        payload = "" if body is None else json.dumps(body)
        code, output = self.exec(SIDECAR, "python", "-c", script, method, path, payload)
        if code != 0:
            raise AssertionError(f"operator {method} {path}: {output}")
        return json.loads(output)


def _swarm_test_pod(example: Path, project: str, directory: Path) -> dict[str, Any]:
    """The compose tests' copy of the example, plus what the crash test needs: a model that
    places orders (its own provider), and the analyst (mediated) allowed to place them without
    an approval (the trader's orders still wait for one)."""
    pod = _test_pod(example, project, directory)
    claw = pod["x-claw"]
    claw["providers"]["orders"] = {
        "api": "openai",
        "base-url": f"http://{ORDERS_UPSTREAM}:8000/v1",
        "key-env": "OPENAI_API_KEY",
        "models": ["order-*"],
    }
    for rule in claw["tool-rules"]:
        if rule.get("effect") == "confirm":
            rule["when"] = f"agent == '{NATIVE_AGENT}'"
    pod["services"][MEDIATED_AGENT]["x-claw"]["tools"] = [
        {
            "service": "trading-api",
            "allow": ["get_market_context", "execute_trade", "list_trades"],
            "principal": "desk-trader",
        }
    ]
    return pod


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in CREDENTIAL_ENVS}
