"""Credentials of a pod: principals (named credentials of tool services, SPEC §9.1) checked
against their services (``agents.py`` binds them to grants); credential starvation (an agent's
own environment must not hold any credential of the pod); and credentials no service is given.

A credential no service is given is a warning, not an error: the sidecar presents the variable
a descriptor or principal names, so a service started without that variable (one renamed on
one side only) answers every call 401, which shows only at call time. Only a service that is
given an ``environment`` in the pod file is judged: one whose address is given
(``x-claw.url``) runs outside this pod file, one with an ``env_file`` may set anything, and one
with no environment at all is configured some other way (its image).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ...sidecar.manifest import Provider
from ...sidecar.model.env_names import AUDIT_KEY_ENV, OPERATOR_TOKEN_ENV
from ..pod_file.governance_spec import PrincipalSpec
from ..pod_file.reader import PodReader
from ..pod_file.reserved import AGENT_ENV_NAMES
from ..pod_file.spec import PodClaw, ServiceClaw
from ..services.descriptors import oauth_problem
from ..services.tool_services import ToolService, ToolServices


def check_principals(
    reader: PodReader,
    claw: PodClaw,
    tool_services: ToolServices,
    claws: dict[str, ServiceClaw | None],
    agent_services: set[str],
) -> dict[str, PrincipalSpec]:
    """Every principal names a tool service that takes a credential."""
    principals = claw.principals or {}
    for name, spec in principals.items():
        where = ("x-claw", "principals", name, "service")
        if spec.service not in reader.services or spec.service in agent_services:
            raise reader.fail(f"principal '{name}': no tool service '{spec.service}'", where)
        service = tool_services.get(spec.service, claws.get(spec.service))
        if spec.auth is not None:
            problem = oauth_problem(spec.auth, service.loaded.descriptor.mcp is not None)
            if problem is not None:
                field_name, message = problem
                raise reader.fail(
                    f"principal '{name}': {message}",
                    ("x-claw", "principals", name, "auth", field_name),
                )
        elif service.loaded.descriptor.auth.type == "none":
            raise reader.fail(
                f"principal '{name}': service '{spec.service}' takes no credential (auth: none)",
                where,
            )
    return principals


def forbidden_variables(
    providers: dict[str, Provider],
    tool_services: Iterable[ToolService],
    principals: Mapping[str, PrincipalSpec] | None = None,
) -> dict[str, str]:
    """Variable name -> what it holds, for every variable an agent must not set."""
    forbidden = {name: "set by clawc in the agent's env file" for name in AGENT_ENV_NAMES}
    forbidden[OPERATOR_TOKEN_ENV] = "the operator token (approvals, the operator API)"
    forbidden[AUDIT_KEY_ENV] = "the audit key (it signs the audit chain)"
    for service in tool_services:
        for env in service.auth.credential_envs:
            forbidden[env] = f"the credential of service '{service.name}'"
    for name, principal in (principals or {}).items():
        for env in principal.credential_envs:
            forbidden[env] = f"the credential of principal '{name}'"
    for provider_name, provider in providers.items():
        for key_env in provider.key_envs:
            forbidden[key_env] = f"the key of provider '{provider_name}'"
    return forbidden


def _env_file_entries(value: Any) -> list[tuple[str, bool]]:
    entries = value if isinstance(value, list) else [value] if value else []
    result = []
    for entry in entries:
        if isinstance(entry, dict):
            result.append((str(entry.get("path", "")), bool(entry.get("required", True))))
        else:
            result.append((str(entry), True))
    return result


def _env_names_in_file(path: Path) -> list[str]:
    names = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name = line.removeprefix("export ").split("=", 1)[0].strip()
        names.append(name)
    return names


def check_starvation(reader: PodReader, name: str, forbidden: dict[str, str]) -> None:
    """Fail when agent service ``name`` sets a forbidden variable in environment or env_file."""
    definition = reader.services[name]
    environment = definition.get("environment") or {}
    keys = (
        list(environment)
        if isinstance(environment, dict)
        else [str(item).split("=", 1)[0] for item in environment]
    )
    for key in keys:
        if key in forbidden:
            raise reader.fail(
                f"agent sets {key}, {forbidden[key]}; agents must not hold credentials",
                (
                    "services",
                    name,
                    "environment",
                    key if isinstance(environment, dict) else keys.index(key),
                ),
                name,
            )
    for entry, required in _env_file_entries(definition.get("env_file")):
        path = reader.directory / entry
        if not path.is_file():
            if required:
                raise reader.fail(
                    f"env_file not found: {entry}", ("services", name, "env_file"), name
                )
            continue
        for key in _env_names_in_file(path):
            if key in forbidden:
                raise reader.fail(
                    f"agent env_file {entry} sets {key}, {forbidden[key]}; "
                    "agents must not hold credentials",
                    ("services", name, "env_file"),
                    name,
                )


def warn_unset_credentials(
    reader: PodReader,
    claws: dict[str, ServiceClaw | None],
    principals: dict[str, PrincipalSpec],
    auth_envs: dict[str, str | None],
) -> None:
    """Warn for each credential variable the service that checks it does not get.

    ``auth_envs``: tool service -> the variable its descriptor's auth names (None: no auth)."""
    needed: dict[str, set[str]] = {service: {env} for service, env in auth_envs.items() if env}
    for principal in principals.values():
        if principal.env:  # an OAuth principal's secret is checked by its IdP, not the service
            needed.setdefault(principal.service, set()).add(principal.env)
    for service, envs in needed.items():
        claw = claws.get(service)
        definition = reader.services.get(service) or {}
        given = _environment_names(definition.get("environment"))
        if (claw is not None and claw.url) or "env_file" in definition or not given:
            continue
        for env in sorted(envs - given):
            reader.warn(
                f"credential variable {env} is not in this service's environment: the sidecar "
                f"presents ${env}, so a service that reads another variable answers 401; set "
                f"{env} here, or name the variable the service reads (auth.env in its "
                "descriptor, or the principal's env)",
                ("services", service, "environment"),
                service,
            )


def _environment_names(environment: Any) -> set[str]:
    """Variable names of a compose ``environment`` (a mapping, or a list of NAME[=value])."""
    if isinstance(environment, dict):
        return {str(name) for name in environment}
    if isinstance(environment, list):
        return {str(item).split("=", 1)[0] for item in environment}
    return set()
