"""``compile_pod``: one pod file (docs/contract.md §2) resolved into agents, tools and policies."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sidecar.manifest import (
    EndUsers,
    Governance,
    Provider,
    RouteTarget,
    SharedLimits,
    Taint,
    TokenIssuer,
)
from .agents import AgentPlan, GrantScope, plan_agents
from .governance.credentials import (
    check_principals,
    check_starvation,
    forbidden_variables,
    warn_unset_credentials,
)
from .governance.identity import resolve_identity
from .governance.resolution import resolve_governance, resolve_shared_limits, resolve_taint
from .pod_file.governance_spec import PrincipalSpec
from .pod_file.providers import pod_providers, warn_unpriced
from .pod_file.reader import PodReader, check_shapes
from .pod_file.reserved import check_reserved
from .pod_file.routes import pod_routes
from .pod_file.spec import (
    PodClaw,
    ServiceClaw,
    read_pod_claw,
    read_service_claw,
)
from .services.tool_services import ToolService, ToolServices


@dataclass
class CompiledPod:
    file: Path
    name: str
    compose: dict[str, Any]
    claw: PodClaw
    providers: dict[str, Provider]
    agents: list[AgentPlan]
    agent_ids: dict[str, list[str]]  # agent service -> ids
    tool_services: dict[str, ToolService]
    warnings: list[str] = field(default_factory=list)  # located, one line each
    principals: dict[str, PrincipalSpec] = field(default_factory=dict)
    governance: Governance | None = None
    taint: Taint | None = None
    shared_limits: SharedLimits | None = None
    routes: dict[str, list[RouteTarget]] | None = None
    identity: TokenIssuer | None = None
    end_users: EndUsers | None = None

    @property
    def directory(self) -> Path:
        return self.file.parent

    @property
    def credential_envs(self) -> list[str]:
        names = [key for p in self.providers.values() for key in p.key_envs]
        names += [e for s in self.tool_services.values() for e in s.auth.credential_envs]
        names += [e for p in self.principals.values() for e in p.credential_envs]
        store = self.claw.shared_limits
        if store is not None:  # the external store's URL, or the password of the one clawc adds
            names.append(store.service.password_env if store.service else str(store.url_env))
        return sorted(set(names))


def _confinement_root(reader: PodReader, claw: PodClaw) -> Path:
    """The directory tree every named file stays in: the pod's directory, or ``x-claw.root``."""
    if claw.root is None:
        return reader.directory.resolve()
    root = (reader.directory / claw.root).resolve()
    if not root.is_dir() or not reader.directory.resolve().is_relative_to(root):
        raise reader.fail("root must be a directory that contains the pod file", ("x-claw", "root"))
    return root


def compile_pod(path: Path | str) -> CompiledPod:
    """Resolve a pod file into agents, their tools and policies; raise :class:`CompileError`."""
    reader = PodReader(Path(path))
    check_shapes(reader)
    check_reserved(reader)
    claw = read_pod_claw(reader)
    claws: dict[str, ServiceClaw | None] = {
        name: read_service_claw(reader, name) for name in reader.services
    }
    agent_services = {n for n, c in claws.items() if c is not None and c.is_agent}
    root = _confinement_root(reader, claw)
    tool_services = ToolServices(reader, root)
    for name, service_claw in claws.items():
        if service_claw is not None and service_claw.describe:
            tool_services.get(name, service_claw)

    principals = check_principals(reader, claw, tool_services, claws, agent_services)
    auth_envs = {n: s.loaded.descriptor.auth.env for n, s in tool_services.by_name.items()}
    warn_unset_credentials(reader, claws, principals, auth_envs)
    scope = GrantScope(reader, tool_services, claws, agent_services, principals)
    agents, agent_ids = plan_agents(scope, claw)
    if not agents:
        reader.warn("no agent found: mark an agent service with 'x-claw: {agent: {}}'", ())

    providers = pod_providers(claw.providers)
    routes = pod_routes(reader, claw.routes, providers)
    forbidden = forbidden_variables(providers, tool_services.by_name.values(), principals)
    store = claw.shared_limits
    if store is not None:
        forbidden[store.service.password_env if store.service else str(store.url_env)] = (
            "the shared store of limits (its URL or password)"
        )
    for name in agent_ids:
        check_starvation(reader, name, forbidden)
    governance = resolve_governance(reader, claw, claws, agents, agent_ids)
    identity, end_users = resolve_identity(reader, claw, root)
    if governance is not None and governance.usd_budgets:
        warn_unpriced(reader, providers)
    return CompiledPod(
        file=reader.file,
        name=claw.pod or reader.file.resolve().parent.name,
        compose=reader.data,
        claw=claw,
        providers=providers,
        agents=agents,
        agent_ids=agent_ids,
        tool_services=tool_services.by_name,
        warnings=reader.warnings,
        principals=principals,
        governance=governance,
        taint=resolve_taint(reader, claw, claws, agents),
        routes=routes or None,
        shared_limits=resolve_shared_limits(reader, claw),
        identity=identity,
        end_users=end_users,
    )
