"""``clawc compile --target swarm``: ``stack.yml`` for ``docker stack deploy`` (SPEC §13.2).

The compose document is rewritten into the v3 shape the engine accepts: no ``build`` or
``restart``, no ``depends_on`` (docker 28 refuses its long form, Swarm ignores ordering), overlay
networks (internal where compose's are), the build's files as Swarm configs (any node can
run the sidecar's task), credentials as Swarm secrets the sidecar reads from ``NAME_FILE``, and
the state volume pinned to one node by a placement constraint.
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

from ..pod import CompiledPod
from ..pod_file.reserved import STATE_VOLUME, STORE_SERVICE
from .compose import BUILD_MOUNT, CONTEXT_MOUNT, MCP_MOUNT
from .workloads import Workload, interpolated, workloads

STACK_VERSION = "3.8"
SECRETS_DIR = "/run/secrets"
_DROPPED = ("build", "depends_on", "restart", "container_name", "links")


def state_label(project: str) -> str:
    """The node label that pins the sidecar (and so its local state volume) to one node."""
    return f"clawpod-state-{project}"


def secret_name(project: str, variable: str) -> str:
    return f"{project}_{variable}"


def _config_key(path: str) -> str:
    return "claw-" + re.sub(r"[^A-Za-z0-9]+", "-", path).strip("-")


def restart_policy(workload: Workload) -> dict[str, Any]:
    """Swarm's form of the service's compose ``restart`` (``Workload.restart``): an agent is
    restarted only where the pod file asks, as compose does."""
    kind, attempts = workload.restart
    if kind == "never":
        return {"condition": "none"}
    if kind == "on-failure":
        policy: dict[str, Any] = {"condition": "on-failure"}
        if attempts is not None:
            policy["max_attempts"] = attempts
        return policy
    return {"condition": "any"}


class SwarmTarget:
    def __init__(self, pod: CompiledPod, document: dict[str, Any], build_files: dict[str, str]):
        self.pod = pod
        self.document = document
        self.project = document["name"]
        self.build_files = build_files
        self.workloads = workloads(pod, document)
        self.configs: dict[str, dict[str, Any]] = {}
        self.secrets: dict[str, dict[str, Any]] = {}
        self.warnings: list[str] = []

    def config(self, path: str) -> str:
        """A Swarm config of one build file; its name carries the content's hash because a
        config cannot change: a new build deploys new configs beside the old ones."""
        key = _config_key(path)
        digest = hashlib.sha256(self.build_files[path].encode()).hexdigest()[:12]
        self.configs[key] = {"file": f"./{path}", "name": f"{self.project}-{key}-{digest}"[:64]}
        return key

    def service(self, workload: Workload) -> dict[str, Any]:
        service = copy.deepcopy(workload.definition)
        for key in _DROPPED:
            service.pop(key, None)
        service["image"] = workload.image
        if workload.role == "agent":
            self.agent_files(workload, service)
        deploy = dict(service.get("deploy") or {})
        deploy.setdefault("restart_policy", restart_policy(workload))
        if not service.get("ports"):
            # Names resolve to the tasks themselves: one task per service gains nothing from a
            # virtual IP, and kernels without IPVS (small VMs) cannot route one at all.
            deploy.setdefault("endpoint_mode", "dnsrr")
        service["deploy"] = deploy
        if workload.role == "tool":
            names = sorted({n for v in workload.environment.values() if v for n in interpolated(v)})
            if names:
                self.warnings.append(
                    f"swarm: service '{workload.name}' takes {', '.join(names)} from the "
                    "environment of `docker stack deploy`; the values are stored in the "
                    "service's definition (docker service inspect)"
                )
        return service

    def agent_files(self, workload: Workload, service: dict[str, Any]) -> None:
        """CONTEXT.md (and a native agent's mcp.json) as configs instead of bind mounts."""
        mounts = {CONTEXT_MOUNT: "CONTEXT.md"}
        if next(a for a in self.pod.agents if a.id == workload.name).mode == "native":
            mounts[MCP_MOUNT] = "mcp.json"
        own = [
            v
            for v in service.get("volumes") or []
            if str(v).split(":")[1:2] not in [[target] for target in mounts]
        ]
        service.pop("volumes", None)
        if own:
            service["volumes"] = own
        service["configs"] = [
            {"source": self.config(f"context/{workload.name}/{name}"), "target": target}
            for target, name in mounts.items()
        ]

    def sidecar(self, workload: Workload) -> dict[str, Any]:
        service = self.service(workload)
        service["volumes"] = [v for v in service["volumes"] if str(v).startswith(STATE_VOLUME)]
        build_files = ["sidecar.json", "digest.json"]
        build_files += sorted(p for p in self.build_files if p.startswith("context/"))
        service["configs"] = [
            {"source": self.config(path), "target": f"{BUILD_MOUNT}/{path}"} for path in build_files
        ]
        environment = {}
        service_secrets = []
        for name in sorted(workload.environment):
            service_secrets.append(self.secret(name))
            environment[f"{name}_FILE"] = f"{SECRETS_DIR}/{name}"
        service["environment"] = environment
        service["secrets"] = service_secrets
        service["deploy"] = {
            "replicas": 1,
            # One sidecar per state volume (SPEC §13.1): an update stops the old task first.
            "update_config": {"order": "stop-first"},
            "restart_policy": {"condition": "any"},
            # The task's own address, so the operator listener can bind its claw-admin alias.
            "endpoint_mode": "dnsrr",
            "placement": {"constraints": [f"node.labels.{state_label(self.project)} == true"]},
        }
        return service

    def secret(self, name: str) -> dict[str, str]:
        """The service's mount of the pod's Swarm secret ``name`` (declared external)."""
        self.secrets[name] = {"external": True, "name": secret_name(self.project, name)}
        return {"source": name, "target": name}

    def store(self, workload: Workload) -> dict[str, Any]:
        """The store of shared limits reads its password from the pod's secret, as the sidecar
        does: a value from the deploy's environment would be kept in the service's definition."""
        service = self.service(workload)
        names = sorted(workload.environment)
        service["environment"] = {f"{name}_FILE": f"{SECRETS_DIR}/{name}" for name in names}
        service["secrets"] = [self.secret(name) for name in names]
        return service

    def networks(self) -> dict[str, Any]:
        networks: dict[str, Any] = {}
        for name, definition in (self.document.get("networks") or {}).items():
            definition = dict(definition or {})
            internal = bool(definition.get("internal"))
            networks[name] = {"driver": "overlay", **({"internal": True} if internal else {})}
        networks.setdefault("default", {"driver": "overlay"})
        return networks

    def stack(self) -> dict[str, Any]:
        services = {}
        for workload in self.workloads:
            if workload.role == "sidecar":
                services[workload.name] = self.sidecar(workload)
            elif workload.name == STORE_SERVICE:
                services[workload.name] = self.store(workload)
            else:
                services[workload.name] = self.service(workload)
            if "build" in workload.definition and "image" not in workload.definition:
                self.warnings.append(
                    f"swarm: service '{workload.name}' is built, not pulled: build and push "
                    f"image '{workload.image}' where every node can pull it"
                )
        stack: dict[str, Any] = {"version": STACK_VERSION, "services": services}
        stack["networks"] = self.networks()
        stack["volumes"] = self.document.get("volumes") or {STATE_VOLUME: {}}
        stack["configs"] = self.configs
        if self.secrets:
            stack["secrets"] = self.secrets
        self.warnings += [
            "swarm: Swarm has no per-service egress rule: agents are kept to the sidecar by the "
            "internal overlay network claw-agents only, and the sidecar's provider egress "
            "(claw-egress) reaches private addresses too",
            "swarm: services start in any order (no depends_on): agents retry until the "
            "sidecar answers",
            f"swarm: pin the sidecar's state to one node: docker node update --label-add "
            f"{state_label(self.project)}=true NODE",
        ]
        return stack


def swarm_files(
    pod: CompiledPod, document: dict[str, Any], build_files: dict[str, str], version: str, dump: Any
) -> tuple[dict[str, str], list[str]]:
    """``stack.yml`` (path relative to the build -> text) and the compile warnings."""
    target = SwarmTarget(pod, document, build_files)
    stack = target.stack()
    header = (
        f"# Generated by clawc {version} (pod {pod.name}); do not edit.\n"
        f"# Run from this directory: docker stack deploy -c stack.yml {target.project}\n"
    )
    return {"stack.yml": header + dump(stack)}, target.warnings
