"""The generated compose file: the pod's services rewired around the sidecar.

See docs/contract.md §3.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

from ...sidecar.model.env_names import AUDIT_KEY_ENV, OPERATOR_TOKEN_ENV, WEBHOOK_SECRET_ENV
from ..pod import CompiledPod
from ..pod_file.governance_spec import StoreServiceSpec
from ..pod_file.reserved import (
    ADMIN_HOST,
    ADMIN_NETWORK,
    NETWORKS,
    SIDECAR_SERVICE,
    STATE_VOLUME,
    STORE_NETWORK,
    STORE_PORT,
    STORE_SERVICE,
    STORE_URL_ENV,
    STORE_VOLUME,
)
from .host_isolation import isolated_internal_network

BUILD_MOUNT = "/claw/build"
STATE_DIR = "/var/lib/claw"
CONTEXT_MOUNT = "/claw/CONTEXT.md"
MCP_MOUNT = "/claw/mcp.json"
DEFAULT_BASE_IMAGE = "${CLAW_BASE_IMAGE:-python:3.11-slim}"
_HEALTH_PROBE = (
    "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"
)


def surface_network(service: str) -> str:
    return f"claw-surface-{service}"


def project_name(pod: str) -> str:
    """Compose project names are lower-case letters, digits, '-' and '_'."""
    return re.sub(r"[^a-z0-9_-]", "-", pod.lower()).lstrip("-_") or "clawpod"


class _Paths:
    """Rewrites paths relative to the pod file so they work from OUT."""

    def __init__(self, pod_dir: Path, out: Path) -> None:
        self.pod_dir = pod_dir.resolve()
        self.out = out.resolve()

    def rewrite(self, value: str) -> str:
        if not value or value.startswith(("/", "$", "~")) or "://" in value:
            return value
        relative = os.path.relpath(self.pod_dir / value, self.out)
        return Path(relative).as_posix()

    def is_path(self, value: str) -> bool:
        return value.startswith((".", "/", "~"))

    def volume(self, entry: Any) -> Any:
        if isinstance(entry, dict):
            if entry.get("type") == "bind" and isinstance(entry.get("source"), str):
                return {**entry, "source": self.rewrite(entry["source"])}
            return entry
        source, sep, rest = str(entry).partition(":")
        if sep and self.is_path(source):
            return f"{self.rewrite(source)}:{rest}"
        return entry

    def build(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.rewrite(value)
        if isinstance(value, dict) and isinstance(value.get("context"), str):
            return {**value, "context": self.rewrite(value["context"])}
        return value

    def env_file(self, value: Any) -> list[Any]:
        entries = value if isinstance(value, list) else [value]
        return [
            {**e, "path": self.rewrite(str(e.get("path", "")))}
            if isinstance(e, dict)
            else self.rewrite(e)
            for e in entries
        ]

    def service(self, definition: dict[str, Any]) -> dict[str, Any]:
        result = dict(definition)
        if "build" in result:
            result["build"] = self.build(result["build"])
        if result.get("env_file"):
            result["env_file"] = self.env_file(result["env_file"])
        if isinstance(result.get("volumes"), list):
            result["volumes"] = [self.volume(v) for v in result["volumes"]]
        extends = result.get("extends")
        if isinstance(extends, dict) and isinstance(extends.get("file"), str):
            result["extends"] = {**extends, "file": self.rewrite(extends["file"])}
        return result


def _without_claw(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_claw(v) for k, v in value.items() if k != "x-claw"}
    if isinstance(value, list):
        return [_without_claw(v) for v in value]
    return value


def _add_networks(definition: dict[str, Any], names: list[str]) -> None:
    networks = definition.get("networks")
    if isinstance(networks, dict):
        definition["networks"] = {**networks, **{n: None for n in names if n not in networks}}
    else:
        current = list(networks) if networks else ["default"]
        definition["networks"] = current + [n for n in names if n not in current]


def _depends_on(value: Any, expand: dict[str, list[str]]) -> dict[str, Any]:
    """Normalise to the mapping form, expanding references to counted agents."""
    if isinstance(value, list):
        value = {name: {"condition": "service_started"} for name in value}
    result: dict[str, Any] = {}
    for name, condition in (value or {}).items():
        for target in expand.get(name, [name]):
            result[target] = condition
    return result


def _operator_envs(pod: CompiledPod) -> list[str]:
    governance = pod.governance
    if governance is None:
        return []
    confirms = any(r.effect == "confirm" for rules in governance.rules.values() for r in rules)
    envs = [OPERATOR_TOKEN_ENV] if confirms or governance.approvals.require != "none" else []
    if governance.approvals.webhook:
        envs.append(WEBHOOK_SECRET_ENV)  # signs each approval webhook (SPEC §15)
    return envs


def _sidecar(
    pod: CompiledPod, out: Path, source_root: Path | None, image: str | None, version: str
) -> dict:
    service: dict[str, Any] = {}
    if image:
        service["image"] = image
    else:
        assert source_root is not None
        context = Path(os.path.relpath(source_root.resolve(), out.resolve())).as_posix()
        service["build"] = {"context": context, "args": {"BASE_IMAGE": DEFAULT_BASE_IMAGE}}
        service["image"] = f"clawpod/sidecar:{version}"
    service["command"] = [
        "python",
        "-m",
        "clawpod.sidecar",
        "--build",
        BUILD_MOUNT,
        "--state-dir",
        STATE_DIR,
    ]
    # The audit chain's HMAC key (docs/contract.md §10) comes from the operator's environment,
    # and so does the operator API's token when a call can wait for an approval (§9.3).
    environment = sorted({*pod.credential_envs, AUDIT_KEY_ENV, *_operator_envs(pod)})
    service["environment"] = {name: f"${{{name}}}" for name in environment}
    service["volumes"] = [
        f"./context:{BUILD_MOUNT}/context:ro",
        f"./sidecar.json:{BUILD_MOUNT}/sidecar.json:ro",
        f"./digest.json:{BUILD_MOUNT}/digest.json:ro",
        f"{STATE_VOLUME}:{STATE_DIR}",
    ]
    service["healthcheck"] = {
        "test": ["CMD", "python", "-c", _HEALTH_PROBE],
        "interval": "5s",
        "timeout": "3s",
        "retries": 12,
        "start_period": "5s",
    }
    service["networks"] = {name: None for name in NETWORKS}
    service["networks"][ADMIN_NETWORK] = {"aliases": [ADMIN_HOST]}
    store = pod.claw.shared_limits.service if pod.claw.shared_limits else None
    if store is not None:
        password = f"${{{store.password_env}}}"
        service["environment"][STORE_URL_ENV] = (
            f"redis://:{password}@{STORE_SERVICE}:{STORE_PORT}/0"
        )
        service["networks"][STORE_NETWORK] = None
    service["restart"] = "unless-stopped"
    return service


# The server's own user in the official Valkey and Redis images (so Kubernetes' restricted
# profile can run it as non-root).
STORE_USER = "999:1000"


def _store(spec: StoreServiceSpec) -> dict[str, Any]:
    """The store of shared limits (SPEC §24), on a network only it and the sidecar join. Its
    password (the variable, or the file ``NAME_FILE`` names: a Swarm secret) reaches the server
    in a file inside its container, never on its command line; without one it does not start."""
    server = "$$(command -v valkey-server || command -v redis-server)"
    name = spec.password_env
    start = (
        f'if [ -n "$${name}_FILE" ]; then {name}=$$(cat "$${name}_FILE"); fi'
        f' && if [ -z "$${name}" ]; then echo "claw-limits: {name} is empty" >&2; exit 1; fi'
        f' && printf "requirepass %s\\n" "$${name}" > /tmp/store.conf'
        f" && exec {server} /tmp/store.conf --appendonly yes --dir /data --port {STORE_PORT}"
    )
    return {
        "image": spec.image,
        "user": STORE_USER,
        "entrypoint": ["sh", "-c", start],
        "expose": [str(STORE_PORT)],
        "environment": {spec.password_env: f"${{{spec.password_env}}}"},
        "volumes": [f"{STORE_VOLUME}:/data"],
        "networks": [STORE_NETWORK],
        "restart": "unless-stopped",
    }


def generate_compose(
    pod: CompiledPod,
    out: Path,
    *,
    source_root: Path | None,
    sidecar_image: str | None,
    version: str,
) -> dict[str, Any]:
    """The compose document written to ``OUT/compose.yml``; it carries no ``x-claw``."""
    original = copy.deepcopy(pod.compose)
    paths = _Paths(pod.directory, out)
    document: dict[str, Any] = {"name": original.pop("name", None) or project_name(pod.name)}
    # Extension fields (x-...) often hold anchors with x-claw inside: no grant may survive there.
    document.update({k: _without_claw(v) for k, v in original.items() if k != "x-claw"})
    surfaced = sorted({s for agent in pod.agents for s in agent.surfaces})
    agents_by_id = {agent.id: agent for agent in pod.agents}
    services: dict[str, Any] = {}
    for name, definition in original["services"].items():
        definition = paths.service({k: v for k, v in definition.items() if k != "x-claw"})
        if "depends_on" in definition:
            definition["depends_on"] = _depends_on(definition["depends_on"], pod.agent_ids)
        if name in pod.agent_ids:
            for agent_id in pod.agent_ids[name]:
                services[agent_id] = _agent_service(definition, agents_by_id[agent_id])
            continue
        extra = ["claw-tools"] if name in pod.tool_services else []
        extra += [surface_network(name)] if name in surfaced else []
        if extra:
            _add_networks(definition, extra)
        services[name] = definition
    services[SIDECAR_SERVICE] = _sidecar(pod, out, source_root, sidecar_image, version)
    store = pod.claw.shared_limits.service if pod.claw.shared_limits else None
    if store is not None:
        services[STORE_SERVICE] = _store(store)
    document["services"] = services
    networks = dict(original.get("networks") or {})
    networks["claw-agents"] = isolated_internal_network("a", document["name"])
    networks["claw-tools"] = isolated_internal_network("t", document["name"])
    networks["claw-egress"] = {"driver": "bridge"}
    networks[ADMIN_NETWORK] = {"internal": True}
    for name in surfaced:
        networks[surface_network(name)] = {"internal": True}
    if store is not None:
        networks[STORE_NETWORK] = {"internal": True}
    document["networks"] = networks
    document["volumes"] = {**(original.get("volumes") or {}), STATE_VOLUME: {}}
    if store is not None:
        document["volumes"][STORE_VOLUME] = {}
    for key in ("configs", "secrets"):
        for entry in (document.get(key) or {}).values():
            if isinstance(entry, dict) and isinstance(entry.get("file"), str):
                entry["file"] = paths.rewrite(entry["file"])
    return document


def _agent_service(definition: dict[str, Any], agent: Any) -> dict[str, Any]:
    service = copy.deepcopy(definition)
    env_files = service.get("env_file") or []
    service["env_file"] = [*env_files, f"agents/{agent.id}.env"]
    volumes = list(service.get("volumes") or [])
    volumes.append(f"./context/{agent.id}/CONTEXT.md:{CONTEXT_MOUNT}:ro")
    if agent.mode == "native":
        # The context's config (token as ${CLAW_AGENT_TOKEN}, from the env file): the literal
        # token config is mode 0600 and owned by whoever compiled, so an agent image running
        # as another user (the example's runs as nobody) could not read it once mounted.
        volumes.append(f"./context/{agent.id}/mcp.json:{MCP_MOUNT}:ro")
    service["volumes"] = volumes
    service["networks"] = ["claw-agents", *(surface_network(s) for s in agent.surfaces)]
    depends_on = dict(service.get("depends_on") or {})
    depends_on[SIDECAR_SERVICE] = {"condition": "service_healthy"}
    service["depends_on"] = depends_on
    return service
