"""Credentials no service is given (a warning, not an error): the sidecar presents the variable
a descriptor or principal names, so a service started without that variable (one renamed on
one side only) answers every call 401, which shows only at call time.

A service whose address is given (``x-claw.url``) runs outside this pod file, and one with an
``env_file`` may set anything: neither is judged.
"""

from __future__ import annotations

from typing import Any

from clawpod.compiler.governance_spec import PrincipalSpec
from clawpod.compiler.pod_reader import PodReader
from clawpod.compiler.pod_spec import ServiceClaw


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
        needed.setdefault(principal.service, set()).add(principal.env)
    for service, envs in needed.items():
        claw = claws.get(service)
        definition = reader.services.get(service) or {}
        if (claw is not None and claw.url) or "env_file" in definition:
            continue
        given = _environment_names(definition.get("environment"))
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
