"""Credential starvation: an agent's own environment must not hold any credential of the pod."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from clawpod.compiler.governance_spec import PrincipalSpec
from clawpod.compiler.operator_client import OPERATOR_TOKEN_ENV
from clawpod.compiler.pod_reader import PodReader
from clawpod.compiler.tool_services import ToolService
from clawpod.sidecar.audit.chain import AUDIT_KEY_ENV
from clawpod.sidecar.manifest import Provider

# Variables clawc writes into agents/<id>.env; an agent's own environment must not override them.
AGENT_ENV_NAMES = (
    "CLAW_AGENT_TOKEN",
    "CLAW_MCP_URL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
)


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
        if service.auth.env:
            forbidden[service.auth.env] = f"the credential of service '{service.name}'"
    for name, principal in (principals or {}).items():
        forbidden[principal.env] = f"the credential of principal '{name}'"
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
