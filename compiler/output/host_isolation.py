"""Agents must not reach the Docker host (SPEC §10).

An internal bridge network has no route out, but the host owns the bridge's gateway address,
so a container on it reaches every host service bound to 0.0.0.0 through that address. Docker
28 and later can leave the gateway address off the host (``gateway_mode_ipv4=isolated`` on an
internal network). Older engines ignore that option; there the operator drops traffic from the
pod's isolated bridges to the host, which the fixed bridge-name prefix makes one rule:
``iptables -I INPUT -i clawi+ -j DROP`` (and ``ip6tables``), see docs/running-a-pod.md.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

ISOLATED_SINCE = (28, 0)
BRIDGE_PREFIX = "clawi"  # Linux interface names are at most 15 characters
FIREWALL_STEP = (
    f"iptables -I INPUT -i {BRIDGE_PREFIX}+ -j DROP; ip6tables -I INPUT -i {BRIDGE_PREFIX}+ -j DROP"
)


def isolated_internal_network(kind: str, project: str) -> dict[str, Any]:
    """An internal network whose bridge gives the host no address (Docker >= 28) and whose
    name the firewall step matches (older engines). ``kind`` is one letter (a: agents,
    t: tools); the project's hash keeps two pods' bridges apart."""
    digest = hashlib.sha256(project.encode()).hexdigest()[:8]
    return {
        "internal": True,
        "driver": "bridge",
        "driver_opts": {
            "com.docker.network.bridge.gateway_mode_ipv4": "isolated",
            "com.docker.network.bridge.gateway_mode_ipv6": "isolated",
            "com.docker.network.bridge.name": f"{BRIDGE_PREFIX}{kind}{digest}",
        },
    }


def engine_warning(server_version: str | None, rules_in_place: bool) -> str | None:
    """What to tell the operator when the engine cannot keep agents off the host and the
    firewall step that does it instead is not (known to be) in place."""
    if server_version is None or rules_in_place:
        return None  # no local engine: the pod may run elsewhere (docs/running-a-pod.md)
    try:
        major, minor = (int(part) for part in server_version.split(".")[:2])
    except ValueError:
        return None
    if (major, minor) >= ISOLATED_SINCE:
        return None
    return (
        f"the local Docker engine ({server_version}) is older than 28.0: it cannot keep agents "
        "from reaching services on the Docker host through their network's gateway, and this "
        f"host's firewall does not drop their traffic; on that host run `{FIREWALL_STEP}` "
        "(docs/running-a-pod.md)"
    )


def firewall_rules_in_place(environ: Mapping[str, str]) -> bool:
    """Whether this machine already drops traffic from the pods' bridges (the firewall step),
    for IPv4 and, where the machine has ip6tables, IPv6. Only a local engine's host is this
    machine; a rule that cannot be checked (no iptables, not root) counts as missing."""
    if environ.get("DOCKER_HOST", "unix://").split("://")[0] not in ("unix", ""):
        return False
    rule = ["INPUT", "-i", f"{BRIDGE_PREFIX}+", "-j", "DROP"]
    for tool in ("iptables", "ip6tables"):
        path = shutil.which(tool)
        if path is None:
            if tool == "iptables":
                return False
            continue
        try:
            done = subprocess.run([path, "-C", *rule], capture_output=True, timeout=5, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
        if done.returncode != 0:
            return False
    return True


def local_engine_version() -> str | None:
    """The local Docker engine's version, or None when there is none to ask."""
    try:
        done = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = done.stdout.strip()
    return version if done.returncode == 0 and version else None
