"""Expanded grants resolved against the pod's tool services into the tools an agent gets."""

from __future__ import annotations

from clawpod.compiler.descriptor import CompiledTool
from clawpod.compiler.governance import with_principal
from clawpod.compiler.governance_spec import PrincipalSpec
from clawpod.compiler.grants import ServiceGrant
from clawpod.compiler.pod_reader import PodReader
from clawpod.compiler.pod_spec import ServiceClaw
from clawpod.compiler.tool_services import ToolService, ToolServices

GrantedTools = list[tuple[ToolService, CompiledTool]]


def resolve_grants(
    reader: PodReader,
    tool_services: ToolServices,
    grants: list[ServiceGrant],
    claws: dict[str, ServiceClaw | None],
    agent_services: set[str],
    service: str | None,
    principals: dict[str, PrincipalSpec],
) -> GrantedTools:
    """The tools ``grants`` name, in grant order; unknown services or tools are errors."""
    tools: GrantedTools = []
    for grant in grants:
        if grant.service not in reader.services:
            known = ", ".join(sorted(s for s in reader.services if s not in agent_services))
            raise reader.fail(
                f"unknown service '{grant.service}' (services: {known})", grant.path, service
            )
        if grant.service in agent_services:
            raise reader.fail(
                f"'{grant.service}' is an agent, not a tool service", grant.path, service
            )
        target = tool_services.get(grant.service, claws.get(grant.service))
        if grant.principal is not None:
            assert grant.principal_path is not None
            target = with_principal(
                reader, target, grant.principal, grant.principal_path, principals, service
            )
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
