"""Agents of a pod: their ids, the surfaces they may reach, the tools their grants name, and the
plan each one compiles to."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..sidecar.manifest import Mode, ToolInjection, ToolPolicy
from .pod_file.governance_spec import PrincipalSpec
from .pod_file.grants import ServiceGrant, expand, union
from .pod_file.reader import PodReader
from .pod_file.spec import (
    AGENT_ID,
    SURFACE,
    AgentMarker,
    PodClaw,
    ServiceClaw,
    effective_policy,
)
from .services.descriptors import CompiledTool
from .services.tool_names import canonical_name
from .services.tool_services import ToolService, ToolServices

GrantedTools = list[tuple[ToolService, CompiledTool]]
DEFAULTS_PATH = ("x-claw", "tools-defaults")


@dataclass
class AgentPlan:
    id: str
    service: str
    mode: Mode
    policy: ToolPolicy
    tools: GrantedTools
    surfaces: list[str]
    tool_injection: ToolInjection = "auto"
    deferred: list[str] = field(default_factory=list)
    """Canonical names of the tools offered only once found (SPEC §23)."""


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


@dataclass(frozen=True)
class GrantScope:
    """What every agent's grants are resolved against: the pod file, its tool services, the
    services' ``x-claw`` blocks, which services are agents, and the pod's principals."""

    reader: PodReader
    tool_services: ToolServices
    claws: dict[str, ServiceClaw | None]
    agent_services: set[str]
    principals: dict[str, PrincipalSpec]


def resolve_grants(
    scope: GrantScope, grants: list[ServiceGrant], service: str | None
) -> GrantedTools:
    """The tools ``grants`` of agent service ``service`` (None: the pod's defaults) name, in
    grant order; unknown services or tools are errors."""
    reader = scope.reader
    tools: GrantedTools = []
    for grant in grants:
        if grant.service not in reader.services:
            known = ", ".join(sorted(s for s in reader.services if s not in scope.agent_services))
            raise reader.fail(
                f"unknown service '{grant.service}' (services: {known})", grant.path, service
            )
        if grant.service in scope.agent_services:
            raise reader.fail(
                f"'{grant.service}' is an agent, not a tool service", grant.path, service
            )
        target = scope.tool_services.get(grant.service, scope.claws.get(grant.service))
        if grant.principal is not None:
            target = _with_principal(scope, target, grant, service)
        available = target.loaded.tools_by_name
        if not available:
            raise reader.fail(f"service '{grant.service}' declares no tools", grant.path, service)
        if grant.all:
            tools += [(target, tool) for tool in target.loaded.tools]
            continue
        for name in grant.names:
            if name not in available:
                raise reader.fail(
                    f"unknown tool '{name}' of service '{grant.service}' "
                    f"(tools: {', '.join(available)})",
                    grant.name_paths[name],
                    service,
                )
            tools.append((target, available[name]))
    return tools


def _with_principal(
    scope: GrantScope, target: ToolService, grant: ServiceGrant, agent_service: str | None
) -> ToolService:
    """The service as ``grant``, which names a principal, calls it."""
    assert grant.principal is not None and grant.principal_path is not None
    spec = scope.principals.get(grant.principal)
    if spec is None:
        known = ", ".join(sorted(scope.principals)) or "none declared"
        raise scope.reader.fail(
            f"unknown principal '{grant.principal}' (x-claw.principals: {known})",
            grant.principal_path,
            agent_service,
        )
    if spec.service != target.name:
        raise scope.reader.fail(
            f"principal '{grant.principal}' is a credential of service '{spec.service}', "
            f"not of '{target.name}'",
            grant.principal_path,
            agent_service,
        )
    return target.as_principal(grant.principal, spec.env, spec.auth)


def plan_agents(scope: GrantScope, claw: PodClaw) -> tuple[list[AgentPlan], dict[str, list[str]]]:
    """Every agent's plan, and each agent service's ids, in pod file order. The pod's default
    grants are resolved first, so a wrong default fails even when no agent inherits it."""
    reader = scope.reader
    defaults = expand(None, (), claw.tools_defaults, DEFAULTS_PATH, reader.failer(None))
    resolve_grants(scope, union(defaults, reader.failer(None)), None)
    agents: list[AgentPlan] = []
    agent_ids: dict[str, list[str]] = {}
    taken = set(reader.services)
    for name in sorted(scope.agent_services, key=list(reader.services).index):
        service_claw = scope.claws[name]
        assert service_claw is not None and service_claw.agent is not None
        ids = claim_agent_ids(reader, name, service_claw.agent, taken)
        agents += _plans(scope, claw, name, service_claw, ids)
        agent_ids[name] = ids
    return agents, agent_ids


def _plans(
    scope: GrantScope, claw: PodClaw, name: str, service_claw: ServiceClaw, ids: list[str]
) -> list[AgentPlan]:
    """The plan of each id of agent service ``name``: its tools, policy, surfaces and mode."""
    reader = scope.reader
    prefix = ("services", name, "x-claw")
    declared = service_claw.tools if "tools" in service_claw.model_fields_set else None
    if "tools" in service_claw.model_fields_set and declared is None:
        raise reader.fail("tools must be a list ([] for no tools)", (*prefix, "tools"), name)
    grants = expand(
        declared, (*prefix, "tools"), claw.tools_defaults, DEFAULTS_PATH, reader.failer(name)
    )
    granted = union(grants, reader.failer(name))
    tools = resolve_grants(scope, granted, name)
    deferred = deferred_tools(granted, tools, claw.defer_tools_over)
    policy = effective_policy(
        claw.tool_policy_defaults,
        service_claw.tool_policy,
        "tool_policy" in service_claw.model_fields_set,
    )
    surfaces = agent_surfaces(reader, name, service_claw, scope.agent_services)
    assert service_claw.agent is not None
    check_agent_definition(reader, name, service_claw.agent)
    mode = service_claw.mode or claw.mode
    injection = service_claw.tool_injection or claw.tool_injection
    return [AgentPlan(i, name, mode, policy, tools, surfaces, injection, deferred) for i in ids]


def deferred_tools(grants: list[ServiceGrant], tools: GrantedTools, over: int | None) -> list[str]:
    """The canonical names of the granted tools offered only once found: every tool when there
    are more than the pod's ``defer-tools-over``, else those a grant says ``defer: true`` of."""
    if over is not None and len(tools) > over:
        return [canonical_name(service.name, tool.name) for service, tool in tools]
    by_service = {grant.service: grant for grant in grants}
    return [
        canonical_name(service.name, tool.name)
        for service, tool in tools
        if by_service[service.name].defers(tool.name)
    ]
