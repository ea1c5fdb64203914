"""Untrusted tool output resolved at compile time (SPEC §17): the pod's taint mode (default
``confirm`` once any granted tool returns untrusted output) and the egress allow-lists."""

from __future__ import annotations

from clawpod.compiler.agent_plan import AgentPlan
from clawpod.compiler.pod_reader import PodReader
from clawpod.compiler.pod_spec import PodClaw, ServiceClaw
from clawpod.sidecar.manifest import Taint


def resolve_taint(
    reader: PodReader,
    claw: PodClaw,
    claws: dict[str, ServiceClaw | None],
    agents: list[AgentPlan],
) -> Taint | None:
    """The sidecar's taint settings; None when no tool of the pod is untrusted and the pod
    sets no mode (nothing can taint a request then)."""
    tool_services = {service.name for agent in agents for service, _ in agent.tools}
    agent_services = {agent.service for agent in agents}
    service_allow: dict[str, list[str]] = {}
    for name, service_claw in claws.items():
        if service_claw is None or service_claw.egress_allow is None:
            continue
        where = ("services", name, "x-claw", "egress-allow")
        if name in agent_services:
            raise reader.fail("egress-allow belongs to a tool service, not an agent", where, name)
        if name not in tool_services:
            reader.warn("egress-allow of a service no agent is granted tools of", where, name)
        service_allow[name] = _hosts(service_claw.egress_allow)
    untrusted = any(tool.untrusted_output for agent in agents for _, tool in agent.tools)
    if not untrusted and claw.taint is None:
        return None
    if not untrusted:
        reader.warn(
            "taint is set but no granted tool returns untrusted output", ("x-claw", "taint")
        )
    return Taint(
        mode=claw.taint or "confirm",
        egress_allow=_hosts(claw.egress_allow or []),
        service_egress_allow=service_allow,
    )


def _hosts(hosts: list[str]) -> list[str]:
    """Host names compare case-insensitively: kept lower-case, duplicates dropped."""
    return list(dict.fromkeys(host.lower() for host in hosts))
