"""Agents of a pod: their ids, the surfaces they may reach, and the plan each one compiles to."""

from __future__ import annotations

from dataclasses import dataclass

from clawpod.compiler.descriptor import CompiledTool
from clawpod.compiler.pod_reader import PodReader
from clawpod.compiler.pod_spec import AGENT_ID, SURFACE, AgentMarker, ServiceClaw
from clawpod.compiler.tool_services import ToolService
from clawpod.sidecar.manifest import Mode, ToolInjection, ToolPolicy


@dataclass
class AgentPlan:
    id: str
    service: str
    mode: Mode
    policy: ToolPolicy
    tools: list[tuple[ToolService, CompiledTool]]
    surfaces: list[str]
    tool_injection: ToolInjection = "auto"


def agent_ids(name: str, marker: AgentMarker) -> list[str]:
    return [name] if marker.count is None else [f"{name}-{i}" for i in range(marker.count)]


def claim_agent_ids(
    reader: PodReader, name: str, marker: AgentMarker, taken: set[str]
) -> list[str]:
    """The agent ids of service ``name``, each valid and new; they join ``taken``."""
    pointer = ("services", name, "x-claw", "agent")
    ids = agent_ids(name, marker)
    for agent_id in ids:
        if not AGENT_ID.match(agent_id):
            raise reader.fail(f"'{agent_id}' is not a valid agent id", pointer, name)
        if agent_id != name and agent_id in taken:
            raise reader.fail(f"agent id '{agent_id}' clashes with a service", pointer, name)
        taken.add(agent_id)
    return ids


def agent_surfaces(
    reader: PodReader, name: str, service_claw: ServiceClaw, agent_services: set[str]
) -> list[str]:
    """The tool services agent ``name`` may reach directly."""
    surfaces = []
    for index, surface in enumerate(service_claw.surfaces or []):
        target = SURFACE.match(surface).group(1)  # type: ignore[union-attr]
        if target not in reader.services or target in agent_services:
            raise reader.fail(
                f"surface '{surface}' names no service",
                ("services", name, "x-claw", "surfaces", index),
                name,
            )
        surfaces.append(target)
    return surfaces


def check_agent_definition(reader: PodReader, name: str, marker: AgentMarker) -> None:
    """Compose settings that would defeat the networks and ids clawc gives agents."""
    if "network_mode" in reader.services[name]:
        raise reader.fail(
            "agents cannot set network_mode: clawc places them on claw-agents",
            ("services", name, "network_mode"),
            name,
        )
    if marker.count and "container_name" in reader.services[name]:
        raise reader.fail(
            "container_name cannot be combined with agent count", ("services", name), name
        )
