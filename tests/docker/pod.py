"""The example pod as the Docker end-to-end tests run it, and helpers to look inside it.

:class:`PodFiles` writes a test copy of ``compose/examples/trading-desk/pod.yml`` (providers
pointed at the scripted upstream, paths made absolute, a per-session pod name), compiles it with
the real ``clawc``, and adds ``.env`` (fresh random credentials) and a compose override.
:class:`Pod` runs it with testcontainers' ``DockerCompose`` and talks to its containers with the
docker SDK.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from subprocess import CalledProcessError
from typing import Any

import docker
import yaml
from docker.models.containers import Container
from testcontainers.compose import DockerCompose

SIDECAR = "claw-sidecar"
UPSTREAM = "fake-llm"
MEDIATED_AGENT = "analyst"
NATIVE_AGENT = "trader"
TOOL_SERVICES = {"trading-api": 4000, "market-news": 4100, "research-mcp": 4200}
UPSTREAM_PORT = 8000
STATE_DIR = "/var/lib/claw"
MODEL = "gpt-4o-mini"
PROBES = Path(__file__).resolve().parent / "probes"

IMAGES = {
    "sidecar": "clawpod-e2e/sidecar:session",
    "upstream": "clawpod-e2e/upstream:session",
    "agent": "clawpod-e2e/agent:session",
    "trading-api": "clawpod-e2e/trading-api:session",
    "market-news": "clawpod-e2e/market-news:session",
    "research-mcp": "clawpod-e2e/research-mcp:session",
}

# Every variable that holds a secret the agents must never see; values are fresh per session.
CREDENTIAL_ENVS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "TRADING_RO_TOKEN",  # principal desk-readonly (the analyst)
    "TRADING_RW_TOKEN",  # principal desk-trader (the trader)
    "NEWS_API_KEY",
    "RESEARCH_API_TOKEN",
    "CLAW_AUDIT_KEY",  # the sidecar refuses to start without its audit key
    "CLAW_OPERATOR_TOKEN",  # the operator API, for the trader's approvals
)

OVERRIDE = """\
# Test-only additions to the compiled pod: the scripted upstream on the egress network only,
# prebuilt images instead of builds, and probe-ready agents.
services:
  {upstream}:
    image: {upstream_image}
    pull_policy: never
    environment:
      EXPECTED_API_KEY: ${{OPENAI_API_KEY}}
      TOOL_MATCH: get_market_context
    networks: [claw-egress]
  trading-api:
    image: {trading_api_image}
    build: !reset null
    pull_policy: never
  market-news:
    image: {market_news_image}
    build: !reset null
    pull_policy: never
  research-mcp:
    image: {research_mcp_image}
    build: !reset null
    pull_policy: never
  {mediated}:
    image: {agent_image}
    build: !reset null
    pull_policy: never
  {native}:
    image: {agent_image}
    build: !reset null
    pull_policy: never
  {sidecar}:
    pull_policy: never
"""


@dataclass(frozen=True)
class PodFiles:
    project: str
    out: Path
    credentials: dict[str, str]

    @property
    def compose_files(self) -> list[str]:
        return ["compose.yml", "compose.e2e.yml"]

    @classmethod
    def write(cls, directory: Path, repo: Path) -> PodFiles:
        project = f"clawpod-e2e-{secrets.token_hex(3)}"
        pod_file = directory / project / "pod.yml"
        pod_file.parent.mkdir(parents=True)
        example = repo / "compose" / "examples" / "trading-desk" / "pod.yml"
        pod = _test_pod(example, project, pod_file.parent)
        pod_file.write_text(yaml.safe_dump(pod, sort_keys=False))
        out = directory / "build"
        _compile(pod_file, out)
        credentials = {
            name: f"e2e-{name.lower()}-{secrets.token_hex(12)}" for name in CREDENTIAL_ENVS
        }
        (out / ".env").write_text("".join(f"{k}={v}\n" for k, v in credentials.items()))
        (out / "compose.e2e.yml").write_text(
            OVERRIDE.format(
                upstream=UPSTREAM,
                upstream_image=IMAGES["upstream"],
                trading_api_image=IMAGES["trading-api"],
                market_news_image=IMAGES["market-news"],
                research_mcp_image=IMAGES["research-mcp"],
                agent_image=IMAGES["agent"],
                mediated=MEDIATED_AGENT,
                native=NATIVE_AGENT,
                sidecar=SIDECAR,
            )
        )
        return cls(project=project, out=out, credentials=credentials)


def _test_pod(example: Path, project: str, directory: Path) -> dict[str, Any]:
    """The example pod, renamed, with absolute paths and providers that point at the upstream."""
    pod = yaml.safe_load(example.read_text())
    here = example.parent
    pod["x-claw"]["pod"] = project
    pod["x-claw"].pop("root", None)
    upstream = f"http://{UPSTREAM}:{UPSTREAM_PORT}"
    pod["x-claw"]["providers"] = {
        "openai": {
            "api": "openai",
            "base-url": f"{upstream}/v1",
            "key-env": "OPENAI_API_KEY",
            "models": ["gpt-*"],
        },
        "anthropic": {
            "api": "anthropic",
            "base-url": upstream,
            "key-env": "ANTHROPIC_API_KEY",
            "models": ["claude-*"],
        },
    }
    for service in pod["services"].values():
        if isinstance(service.get("build"), str):
            service["build"] = str((here / service["build"]).resolve())
        claw = service.get("x-claw") or {}
        if "describe" in claw:  # descriptors are read only from inside the pod's tree
            source = (here / claw["describe"]).resolve()
            shutil.copytree(source.parent, directory / "descriptors", dirs_exist_ok=True)
            claw["describe"] = f"descriptors/{source.name}"
    return pod


def _compile(pod_file: Path, out: Path) -> None:
    clawc = Path(sys.executable).parent / "clawc"
    command = [str(clawc), "compile", str(pod_file), "-o", str(out)]
    command += ["--sidecar-image", IMAGES["sidecar"]]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise AssertionError(f"clawc compile failed:\n{result.stdout}{result.stderr}")


class Pod:
    def __init__(self, files: PodFiles) -> None:
        self.files = files
        self.compose = DockerCompose(
            context=files.out,
            compose_file_name=files.compose_files,
            env_file=".env",
            wait=True,
        )
        self.client = docker.from_env()

    # lifecycle

    def start(self) -> None:
        # Compose prefers the shell's variables to .env: the suite's own audit key (set for
        # in-process sidecars) must not replace the pod's.
        shadowing = {name: os.environ.pop(name) for name in CREDENTIAL_ENVS if name in os.environ}
        try:
            self.compose.start()
        except CalledProcessError as exc:
            logs = self._logs()
            self.stop()
            raise AssertionError(
                f"docker compose up failed:\n{exc.stderr.decode(errors='replace')}\n{logs}"
            ) from None
        finally:
            os.environ.update(shadowing)

    def stop(self) -> None:
        self.compose.stop(down=True)

    def _logs(self) -> str:
        try:
            stdout, stderr = self.compose.get_logs()
        except CalledProcessError:
            return "(no logs)"
        return stdout + stderr

    def restart(self, service: str, timeout_s: float = 60) -> None:
        self.container(service).restart(timeout=10)
        self.wait_healthy(service, timeout_s)

    def wait_healthy(self, service: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.container(service).attrs["State"]
            if state.get("Health", {}).get("Status") == "healthy":
                return
            time.sleep(0.5)
        raise AssertionError(f"{service} not healthy after {timeout_s}s:\n{self._logs()}")

    # looking inside

    def container(self, service: str) -> Container:
        labels = [
            f"com.docker.compose.project={self.files.project}",
            f"com.docker.compose.service={service}",
        ]
        found = self.client.containers.list(all=True, filters={"label": labels})
        if len(found) != 1:
            raise AssertionError(f"expected one container for {service}, found {len(found)}")
        return found[0]

    def exec(
        self, service: str, *command: str, env: dict[str, str] | None = None
    ) -> tuple[int, str]:
        result = self.container(service).exec_run(list(command), demux=True, environment=env)
        stdout, stderr = result.output
        return result.exit_code, (stdout or b"").decode() + (stderr or b"").decode()

    def probe(
        self, service: str, script: str, *args: str, env: dict[str, str] | None = None
    ) -> Any:
        """Run ``probes/<script>.py`` inside ``service``'s container (``env`` added to its
        environment); its JSON output."""
        source = (PROBES / f"{script}.py").read_text()
        code, output = self.exec(service, "python", "-c", source, *args, env=env)
        if code != 0:
            raise AssertionError(f"probe {script} in {service} exited {code}:\n{output}")
        return json.loads(output.strip().splitlines()[-1])

    def chat(
        self, agent: str, messages: list[dict[str, Any]], *, stream: bool = False
    ) -> dict[str, Any]:
        mode = ["stream"] if stream else []
        return self.probe(agent, "chat", MODEL, json.dumps(messages), *mode)

    def reach(self, service: str, targets: list[str]) -> dict[str, dict[str, Any]]:
        return {r["target"]: r for r in self.probe(service, "reach", *targets)}

    def addresses(self, service: str) -> list[str]:
        networks = self.container(service).attrs["NetworkSettings"]["Networks"]
        return [n["IPAddress"] for n in networks.values() if n.get("IPAddress")]

    def gateways(self, network: str) -> list[str]:
        """The gateway addresses of one of the pod's networks: the host's side of its bridge
        (on Docker >= 28 an isolated internal network gives the host none)."""
        attrs = self.client.networks.get(f"{self.files.project}_{network}").attrs
        configs = (attrs.get("IPAM") or {}).get("Config") or []
        found = [c["Gateway"] for c in configs if c.get("Gateway")]
        # Without a recorded gateway, the subnet's first address is the one the host would own.
        for config in configs:
            if not config.get("Gateway") and config.get("Subnet", "").count(".") == 3:
                network_address = config["Subnet"].split("/")[0].rsplit(".", 1)[0]
                found.append(f"{network_address}.1")
        return found

    def audit(self, agent: str) -> list[dict[str, Any]]:
        code, output = self.exec(SIDECAR, "cat", f"{STATE_DIR}/audit/{agent}.jsonl")
        if code != 0:
            return []
        return [json.loads(line) for line in output.splitlines() if line.strip()]

    def upstream_requests(self) -> list[dict[str, Any]]:
        """What the scripted upstream was sent, one summary per request (see upstream/app.py)."""
        logs = self.container(UPSTREAM).logs(stdout=True, stderr=False).decode()
        return [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
