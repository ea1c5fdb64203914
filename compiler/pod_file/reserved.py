"""The compose names clawc adds to every pod, which a pod file therefore cannot use, the
variables clawc gives every agent, and what a variable name may be."""

from __future__ import annotations

import re

from .reader import PodReader

SIDECAR_SERVICE = "claw-sidecar"
SIDECAR_HOST_URL = f"http://{SIDECAR_SERVICE}:8080"
# The operator listener's network: the sidecar binds /metrics and /readyz only to its address
# there (the alias below resolves to it), and no agent is attached to it.
ADMIN_NETWORK = "claw-admin"
ADMIN_HOST = "claw-sidecar-admin"
ADMIN_PORT = 9090
NETWORKS = ("claw-agents", "claw-tools", "claw-egress", ADMIN_NETWORK)
STATE_VOLUME = "claw-state"
# The store of shared limits clawc adds (x-claw.shared-limits.service, SPEC §24): its service,
# the network only it and the sidecar join, its data volume, the URL variable the sidecar reads.
STORE_SERVICE = "claw-limits"
STORE_NETWORK = "claw-limits"
STORE_VOLUME = "claw-limits-data"
STORE_PORT = 6379
STORE_URL_ENV = "CLAW_LIMITS_URL"
# A variable a descriptor's auth.env, a provider's key-env or a principal's env names.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MCP_URL = f"{SIDECAR_HOST_URL}/mcp"
AGENT_TOKEN_ENV = "CLAW_AGENT_TOKEN"


def agent_environment(token: str) -> dict[str, str]:
    """What clawc writes into agents/<id>.env: the agent's token under each name a client reads
    it from, and the sidecar's URLs."""
    return {
        AGENT_TOKEN_ENV: token,
        "CLAW_MCP_URL": MCP_URL,
        "OPENAI_BASE_URL": f"{SIDECAR_HOST_URL}/v1",
        "OPENAI_API_KEY": token,
        "ANTHROPIC_BASE_URL": SIDECAR_HOST_URL,
        "ANTHROPIC_API_KEY": token,
    }


# An agent's own environment must not override them.
AGENT_ENV_NAMES = tuple(agent_environment(""))


def check_reserved(reader: PodReader) -> None:
    if SIDECAR_SERVICE in reader.services:
        raise reader.fail(
            f"'{SIDECAR_SERVICE}' is reserved for the sidecar", ("services", SIDECAR_SERVICE)
        )
    for section, names in (
        ("services", (STORE_SERVICE,)),
        ("networks", (*NETWORKS, STORE_NETWORK)),
        ("volumes", (STATE_VOLUME, STORE_VOLUME)),
    ):
        for reserved in names:
            if reserved in (reader.data.get(section) or {}):
                raise reader.fail(f"'{reserved}' is reserved by clawc", (section, reserved))
