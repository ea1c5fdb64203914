"""The compose names clawc adds to every pod, which a pod file therefore cannot use, the
variables clawc gives every agent, and what a variable name may be."""

from __future__ import annotations

import re

from clawpod.compiler.pod_file.reader import PodReader

SIDECAR_SERVICE = "claw-sidecar"
SIDECAR_HOST_URL = f"http://{SIDECAR_SERVICE}:8080"
# The operator listener's network: the sidecar binds /metrics and /readyz only to its address
# there (the alias below resolves to it), and no agent is attached to it.
ADMIN_NETWORK = "claw-admin"
ADMIN_HOST = "claw-sidecar-admin"
ADMIN_PORT = 9090
NETWORKS = ("claw-agents", "claw-tools", "claw-egress", ADMIN_NETWORK)
STATE_VOLUME = "claw-state"
# A variable a descriptor's auth.env, a provider's key-env or a principal's env names.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Variables clawc writes into agents/<id>.env; an agent's own environment must not override them.
AGENT_TOKEN_ENV = "CLAW_AGENT_TOKEN"
AGENT_ENV_NAMES = (
    AGENT_TOKEN_ENV,
    "CLAW_MCP_URL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
)


def check_reserved(reader: PodReader) -> None:
    if SIDECAR_SERVICE in reader.services:
        raise reader.fail(
            f"'{SIDECAR_SERVICE}' is reserved for the sidecar", ("services", SIDECAR_SERVICE)
        )
    for section, names in (("networks", NETWORKS), ("volumes", (STATE_VOLUME,))):
        for reserved in names:
            if reserved in (reader.data.get(section) or {}):
                raise reader.fail(f"'{reserved}' is reserved by clawc", (section, reserved))
