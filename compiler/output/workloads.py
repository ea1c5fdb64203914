"""What the compose target decided, read back per service for the other targets (SPEC §13.2).

The compose document ``generate_compose`` builds already holds the pod's topology: which
service is an agent, a tool service or the sidecar, the networks each one joins, its image,
environment and ports. The Kubernetes and Swarm targets translate that document instead of
deciding any of it again, so the three targets cannot drift apart.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from ..pod import CompiledPod
from ..pod_file.reserved import NETWORKS, SIDECAR_SERVICE

Role = Literal["agent", "tool", "service", "sidecar"]
Restart = Literal["never", "on-failure", "always"]
# Compose interpolation: ${NAME}, ${NAME:-default} and the other modifiers, $NAME; $$ is a '$'.
_INTERPOLATION = re.compile(
    r"\$\$|\$\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:[:?+-][^}]*)?\}|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)"
)


@dataclass
class Port:
    number: int
    protocol: str = "TCP"
    published: bool = False


@dataclass
class Workload:
    """One service of the compose document, as the other targets need it."""

    name: str
    role: Role
    definition: dict[str, Any]
    image: str | None
    networks: list[str]
    ports: list[Port] = field(default_factory=list)
    tool_ports: set[int] = field(default_factory=set)  # the ports the sidecar calls (tools)

    @property
    def environment(self) -> dict[str, str | None]:
        """``environment`` as a mapping; a bare ``NAME`` (list form) maps to None."""
        value = self.definition.get("environment") or {}
        if isinstance(value, dict):
            return {str(k): None if v is None else str(v) for k, v in value.items()}
        pairs = (str(item).partition("=") for item in value)
        return {name: (text if sep else None) for name, sep, text in pairs}

    @property
    def restart(self) -> tuple[Restart, int | None]:
        """When the scheduler starts the service again, and at most how often (None: no bound),
        from its compose ``restart``. Without one, an agent is not restarted, as compose does:
        the example's agents are one-shot programs, and a restart would ask a paid question or
        file an order again. Other services are servers that a cluster keeps running."""
        value = str(self.definition.get("restart") or "").strip()
        if not value:
            return ("never", None) if self.role == "agent" else ("always", None)
        if value == "no":
            return "never", None
        kind, _, attempts = value.partition(":")
        if kind == "on-failure":
            return "on-failure", int(attempts) if attempts.strip().isdigit() else None
        return "always", None  # always, unless-stopped

    def argv(self, key: str) -> list[str] | None:
        """``command`` or ``entrypoint`` as a list (a string is split the way compose does)."""
        value = self.definition.get(key)
        if value is None:
            return None
        return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def interpolated(value: str) -> list[str]:
    """The variables a compose value takes from the operator's environment."""
    return [m["braced"] or m["bare"] for m in _INTERPOLATION.finditer(value) if m[0] != "$$"]


def substitute(value: str, replace: Any) -> str:
    """``value`` with every interpolation replaced by ``replace(name)`` and ``$$`` by ``$``."""

    def one(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        return replace(match["braced"] or match["bare"])

    return _INTERPOLATION.sub(one, value)


def _ports(definition: dict[str, Any]) -> list[Port]:
    ports: list[Port] = []
    for entry in definition.get("expose") or []:
        number, _, protocol = str(entry).partition("/")
        if number.isdigit():
            ports.append(Port(int(number), (protocol or "tcp").upper()))
    for entry in definition.get("ports") or []:
        if isinstance(entry, dict):
            if str(entry.get("target", "")).isdigit():
                protocol = str(entry.get("protocol") or "tcp").upper()
                ports.append(Port(int(entry["target"]), protocol, "published" in entry))
            continue
        text, _, protocol = str(entry).partition("/")
        target = text.rsplit(":", 1)[-1]
        if target.isdigit():
            ports.append(Port(int(target), (protocol or "tcp").upper(), ":" in text))
    unique: dict[tuple[int, str], Port] = {}
    for port in ports:
        unique.setdefault((port.number, port.protocol), port)
    return list(unique.values())


def _networks(definition: dict[str, Any]) -> list[str]:
    networks = definition.get("networks")
    if not networks:
        return ["default"]
    return [str(name) for name in networks]


def _url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def workloads(pod: CompiledPod, document: dict[str, Any]) -> list[Workload]:
    """Every service of the compose document with its role, in the document's order."""
    agents = {agent.id for agent in pod.agents}
    result: list[Workload] = []
    project = document["name"]
    for name, definition in document["services"].items():
        role: Role
        if name == SIDECAR_SERVICE:
            role = "sidecar"
        elif name in agents:
            role = "agent"
        elif name in pod.tool_services:
            role = "tool"
        else:
            role = "service"
        image = definition.get("image")
        if image is None and "build" in definition:
            image = f"{project}-{name}"  # the name docker compose gives an image it builds
        workload = Workload(name, role, definition, image, _networks(definition))
        workload.ports = _ports(definition)
        if role == "tool":
            workload.tool_ports = {_url_port(pod.tool_services[name].base_url)}
        result.append(workload)
    return result


_DOCKERFILE_MAX_BYTES = 1 << 20  # a Dockerfile is read for its USER line only


def image_user(pod: CompiledPod, service: str) -> str | None:
    """The ``USER`` the final stage of the service's Dockerfile declares, where the pod file
    builds the image from a context on this machine; None when it names none or cannot be
    read (an image pulled by name, a remote context, an inline Dockerfile)."""
    build = (pod.compose.get("services") or {}).get(service, {}).get("build")
    if isinstance(build, str):
        build = {"context": build}
    if not isinstance(build, dict) or not isinstance(build.get("context", "."), str):
        return None
    context = pod.directory / str(build.get("context", "."))
    dockerfile = context / str(build.get("dockerfile") or "Dockerfile")
    try:
        with dockerfile.open("rb") as handle:
            text = handle.read(_DOCKERFILE_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    user = None
    for line in text.replace("\\\n", " ").splitlines():
        words = line.split()
        if not words:
            continue
        instruction = words[0].upper()
        if instruction == "FROM":
            user = None  # a new stage starts as its base image's user, unknown here
        elif instruction == "USER" and len(words) > 1:
            user = words[1]
    return user


def pod_networks(document: dict[str, Any]) -> dict[str, bool]:
    """The networks of the document that are the pod's own (and the agents' surfaces), each
    with whether it is internal; the four claw networks are translated on their own."""
    declared = document.get("networks") or {}
    used = {n for s in document["services"].values() for n in _networks(s)}
    return {
        name: bool((declared.get(name) or {}).get("internal"))
        for name in sorted(used | set(declared))
        if name not in NETWORKS
    }
