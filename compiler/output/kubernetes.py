"""``clawc compile --target kubernetes``: the ``k8s/`` folder of a build (SPEC §13.2).

Containers of one Pod share a network namespace and NetworkPolicies select Pods, so the sidecar
is its own Pod (a one-replica StatefulSet owning the state volume) and the compose target's
networks become NetworkPolicies over Pod labels. Everything else (images, environment, ports,
which service is what) is read from the compose document (``workloads.py``).
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import CompileError
from ..pod import CompiledPod
from ..pod_file.reserved import (
    ADMIN_HOST,
    ADMIN_PORT,
    AGENT_TOKEN_ENV,
    SIDECAR_SERVICE,
)
from .compose import BUILD_MOUNT, CONTEXT_MOUNT, MCP_MOUNT, STATE_DIR
from .workloads import (
    Workload,
    image_user,
    interpolated,
    pod_networks,
    substitute,
    workloads,
)

AGENT_PORT = 8080
CREDENTIALS_SECRET = "claw-credentials"
OPERATOR_LABEL = "clawpod.io/operator"
NETWORK_LABEL = "net.clawpod.io/"  # + network name: "true" on the Pods that join it
BUILD_CONFIGMAP = "claw-build"
STATE_CLAIM = "claw-state"
MAX_CONFIGMAP_BYTES = 1024 * 1024  # what the API server stores in one ConfigMap
JOB_RETRIES = 6  # Kubernetes' own default backoffLimit: compose's bare on-failure has no bound
SIDECAR_UID = 10001  # the sidecar image's user (Dockerfile)
# Provider egress goes to public addresses only: no private, shared, loopback, link-local
# (cloud metadata lives at 169.254.169.254 and fd00:ec2::254) or IPv4-mapped addresses.
NON_PUBLIC_V4 = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
)
NON_PUBLIC_V6 = ("::1/128", "::ffff:0:0/96", "fc00::/7", "fe80::/10")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
DNS_EGRESS = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}


def namespace_name(project: str) -> str:
    name = re.sub(r"[^a-z0-9-]", "-", project.lower()).strip("-")[:63].strip("-")
    return name if name and name[0].isalpha() else f"pod-{name}"[:63].strip("-")


def _check_name(name: str, what: str) -> None:
    if not _DNS_LABEL.match(name):
        raise CompileError(
            f"{what} '{name}' cannot be a Kubernetes Service name (lower-case letters, digits "
            "and '-', starting with a letter, at most 63): other Pods reach it by that name"
        )


class KubernetesTarget:
    def __init__(
        self,
        pod: CompiledPod,
        document: dict[str, Any],
        build_files: dict[str, str],
        version: str,
    ) -> None:
        self.pod = pod
        self.namespace = namespace_name(document["name"])
        self.workloads = workloads(pod, document)
        self.networks = pod_networks(document)
        self.build_files = build_files  # sidecar.json, digest.json and context/, as written
        self.version = version
        self.secret_keys: set[str] = set()
        self.agent_secrets: dict[str, list[str]] = {}
        self.warnings: list[str] = []
        self.rootless_unknown: list[str] = []  # services whose user the pod file does not name
        for workload in self.workloads:
            _check_name(workload.name, "service")
            if workload.name == ADMIN_HOST:
                # Its Service would take the operator listener's name (and its traffic).
                raise CompileError(f"'{ADMIN_HOST}' is reserved for the sidecar on Kubernetes")
        for network in self.networks:
            if not _LABEL_NAME.match(network):
                raise CompileError(f"network '{network}' cannot be part of a Kubernetes label")

    # -- labels and security ---------------------------------------------------------------

    def labels(self, workload: Workload) -> dict[str, str]:
        labels = {
            **self.selector(workload.name),
            "app.kubernetes.io/component": workload.role,
            "app.kubernetes.io/part-of": "clawpod",
            "app.kubernetes.io/managed-by": "clawc",
            "app.kubernetes.io/version": self.version,
        }
        for network in workload.networks:
            if network in self.networks:
                labels[NETWORK_LABEL + network] = "true"
        return labels

    def selector(self, name: str) -> dict[str, str]:
        return {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": self.namespace}

    def component(self, role: str) -> dict[str, Any]:
        return {
            "matchLabels": {
                "app.kubernetes.io/component": role,
                "app.kubernetes.io/instance": self.namespace,
            }
        }

    @staticmethod
    def container_security(read_only_root: bool) -> dict[str, Any]:
        """The restricted Pod Security profile, per container."""
        return {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": read_only_root,
            "seccompProfile": {"type": "RuntimeDefault"},
        }

    def pod_security(self, workload: Workload) -> dict[str, Any]:
        security: dict[str, Any] = {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        if workload.role == "sidecar":
            security |= {"runAsUser": SIDECAR_UID, "runAsGroup": SIDECAR_UID}
            security["fsGroup"] = SIDECAR_UID  # the state volume is writable by the sidecar
            return security
        # The pod file's user, else the one the image's own Dockerfile declares.
        user = str(workload.definition.get("user") or image_user(self.pod, workload.name) or "")
        uid, _, gid = user.partition(":")
        if uid.isdigit() and int(uid) > 0:
            security["runAsUser"] = int(uid)
            if gid.isdigit():
                security["runAsGroup"] = int(gid)
        else:
            self.rootless_unknown.append(workload.name)
        return security

    # -- environment ------------------------------------------------------------------------

    def secret_ref(self, secret: str, key: str) -> dict[str, Any]:
        return {"valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}

    def environment(self, workload: Workload) -> list[dict[str, Any]]:
        """Literal values stay; every value compose would take from the operator's environment
        comes from the pod's Secret instead (Kubernetes expands ``$(NAME)`` of earlier entries)."""
        referenced: dict[str, dict[str, Any]] = {}
        values: list[dict[str, Any]] = []
        for name, value in workload.environment.items():
            if value is None:
                value = f"${{{name}}}"  # a bare name passes the operator's variable through
            names = interpolated(value)
            self.secret_keys.update(names)
            if names == [name] and value.startswith("$"):
                entry = {"name": name, **self.secret_ref(CREDENTIALS_SECRET, name)}
                referenced[name] = entry
                continue
            for variable in names:
                if variable not in referenced:
                    referenced[variable] = {
                        "name": variable,
                        **self.secret_ref(CREDENTIALS_SECRET, variable),
                    }
            text = substitute(value, lambda variable: f"$({variable})")
            values.append({"name": name, "value": text})
        if workload.definition.get("env_file") and workload.role != "agent":
            self.warnings.append(
                f"kubernetes: the env_file of service '{workload.name}' is not carried: put its "
                f"variables under 'environment' (values from the {CREDENTIALS_SECRET} Secret)"
            )
        return [*referenced.values(), *values]

    def agent_environment(self, agent_id: str) -> list[dict[str, Any]]:
        """The agent's env file: its token from the agent's own Secret, the URLs as values."""
        secret = f"claw-agent-{agent_id}"
        entries: list[dict[str, Any]] = []
        lines = self.build_files[f"agents/{agent_id}.env"].splitlines()
        token = next(
            line.partition("=")[2] for line in lines if line.startswith(f"{AGENT_TOKEN_ENV}=")
        )
        for line in lines:
            name, sep, value = line.partition("=")
            if not sep or name.startswith("#"):
                continue
            if value == token:
                entries.append({"name": name, **self.secret_ref(secret, AGENT_TOKEN_ENV)})
            else:
                entries.append({"name": name, "value": value})
        self.agent_secrets[secret] = [AGENT_TOKEN_ENV]
        return entries

    # -- workloads --------------------------------------------------------------------------

    def container(self, workload: Workload, read_only_root: bool) -> dict[str, Any]:
        if workload.image is None:
            raise CompileError(f"service '{workload.name}' has no image to run on Kubernetes")
        container: dict[str, Any] = {"name": workload.name, "image": workload.image}
        if (entrypoint := workload.argv("entrypoint")) is not None:
            container["command"] = entrypoint
        if (command := workload.argv("command")) is not None:
            container["args"] = command
        if workload.definition.get("working_dir"):
            container["workingDir"] = str(workload.definition["working_dir"])
        env = self.environment(workload)
        if workload.role == "agent":
            env += self.agent_environment(workload.name)
        if env:
            container["env"] = env
        if workload.ports:
            container["ports"] = [
                {"containerPort": p.number, "protocol": p.protocol} for p in workload.ports
            ]
        for port in workload.ports:
            if port.published:
                self.warnings.append(
                    f"kubernetes: the published port {port.number} of '{workload.name}' is "
                    "reachable only inside the cluster (publish it with an Ingress or a "
                    "LoadBalancer Service of your own)"
                )
        container["securityContext"] = self.container_security(read_only_root)
        container["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
        return container

    def controller(self, workload: Workload) -> dict[str, Any]:
        container = self.container(workload, read_only_root=False)
        volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
        if workload.role == "agent":
            context = f"claw-context-{workload.name}"
            volumes.append({"name": "claw-context", "configMap": {"name": context}})
            container["volumeMounts"].append(
                {"name": "claw-context", "mountPath": CONTEXT_MOUNT, "subPath": "CONTEXT.md"}
            )
            agent = next(a for a in self.pod.agents if a.id == workload.name)
            if agent.mode == "native":
                container["volumeMounts"].append(
                    {"name": "claw-context", "mountPath": MCP_MOUNT, "subPath": "mcp.json"}
                )
        self._warn_volumes(workload)
        template: dict[str, Any] = {
            "metadata": {"labels": self.labels(workload)},
            "spec": {
                "automountServiceAccountToken": False,
                "securityContext": self.pod_security(workload),
                "containers": [container],
                "volumes": volumes,
            },
        }
        restart, attempts = workload.restart
        if restart == "always":
            return {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": workload.name, "labels": self.labels(workload)},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": self.selector(workload.name)},
                    "template": template,
                },
            }
        # A Deployment restarts its Pod whenever it exits; a program that runs once (compose
        # gives it no restart, or on-failure) is a Job, restarted only where the pod file asks.
        template["spec"]["restartPolicy"] = "Never" if restart == "never" else "OnFailure"
        retries = 0 if restart == "never" else (JOB_RETRIES if attempts is None else attempts)
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": workload.name, "labels": self.labels(workload)},
            "spec": {"backoffLimit": retries, "template": template},
        }

    def _warn_volumes(self, workload: Workload) -> None:
        own = [v for v in workload.definition.get("volumes") or [] if "/claw/" not in str(v)]
        if own:
            self.warnings.append(
                f"kubernetes: the volumes of service '{workload.name}' are not carried "
                "(give it PersistentVolumeClaims or ConfigMaps of your own)"
            )

    def service(self, workload: Workload, *, headless: bool = False) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "selector": self.selector(workload.name),
            "ports": [
                {
                    "name": f"{p.protocol.lower()}-{p.number}",
                    "port": p.number,
                    "targetPort": p.number,
                    "protocol": p.protocol,
                }
                for p in workload.ports
            ],
        }
        if headless:
            spec["clusterIP"] = "None"
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": workload.name, "labels": self.labels(workload)},
            "spec": spec,
        }

    # -- the sidecar ------------------------------------------------------------------------

    def sidecar(self, workload: Workload) -> list[dict[str, Any]]:
        container = self.container(workload, read_only_root=True)
        # The operator listener binds every address of the sidecar's own Pod; NetworkPolicy
        # (claw-admin) decides who reaches it, as the claw-admin network does in compose.
        container["args"] = [*(container.get("args") or []), "--admin-host", "0.0.0.0"]
        container["ports"] = [
            {"name": "agents", "containerPort": AGENT_PORT, "protocol": "TCP"},
            {"name": "operator", "containerPort": ADMIN_PORT, "protocol": "TCP"},
        ]
        container["volumeMounts"] += [
            {"name": STATE_CLAIM, "mountPath": STATE_DIR},
            {"name": "claw-build", "mountPath": BUILD_MOUNT, "readOnly": True},
        ]
        container["livenessProbe"] = {
            "httpGet": {"path": "/healthz", "port": "agents"},
            "periodSeconds": 10,
            "failureThreshold": 3,
        }
        container["readinessProbe"] = {
            "httpGet": {"path": "/readyz", "port": "operator"},
            "periodSeconds": 5,
            "failureThreshold": 2,
        }
        container["startupProbe"] = {
            "httpGet": {"path": "/healthz", "port": "agents"},
            "periodSeconds": 2,
            "failureThreshold": 30,
        }
        labels = self.labels(workload)
        statefulset = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": SIDECAR_SERVICE, "labels": labels},
            "spec": {
                # One sidecar per state volume (SPEC §13.1): a StatefulSet never runs two Pods
                # of one ordinal, so an update stops the old sidecar before the new one starts.
                "replicas": 1,
                "serviceName": SIDECAR_SERVICE,
                "podManagementPolicy": "OrderedReady",
                "updateStrategy": {"type": "RollingUpdate"},
                "selector": {"matchLabels": self.selector(SIDECAR_SERVICE)},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "securityContext": self.pod_security(workload),
                        "terminationGracePeriodSeconds": 30,
                        "containers": [container],
                        "volumes": [
                            {"name": "tmp", "emptyDir": {}},
                            {"name": "claw-build", "projected": {"sources": self.build_sources()}},
                        ],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": STATE_CLAIM, "labels": self.selector(SIDECAR_SERVICE)},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}},
                        },
                    }
                ],
            },
        }
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SIDECAR_SERVICE, "labels": labels},
            "spec": {
                "clusterIP": "None",  # the name resolves to the one sidecar Pod, as in compose
                "selector": self.selector(SIDECAR_SERVICE),
                "ports": [{"name": "agents", "port": AGENT_PORT, "targetPort": "agents"}],
            },
        }
        admin = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": ADMIN_HOST, "labels": labels},
            "spec": {
                "selector": self.selector(SIDECAR_SERVICE),
                "ports": [{"name": "operator", "port": ADMIN_PORT, "targetPort": "operator"}],
            },
        }
        return [statefulset, service, admin]

    def build_sources(self) -> list[dict[str, Any]]:
        """The build's files at their paths under the build mount, from the ConfigMaps."""
        sources = [
            {
                "configMap": {
                    "name": BUILD_CONFIGMAP,
                    "items": [
                        {"key": "sidecar.json", "path": "sidecar.json"},
                        {"key": "digest.json", "path": "digest.json"},
                    ],
                }
            }
        ]
        for agent_id, files in self.context_files().items():
            sources.append(
                {
                    "configMap": {
                        "name": f"claw-context-{agent_id}",
                        "items": [
                            {"key": key, "path": f"context/{agent_id}/{key}"} for key in files
                        ],
                    }
                }
            )
        return sources

    def context_files(self) -> dict[str, dict[str, str]]:
        by_agent: dict[str, dict[str, str]] = {}
        for path, text in self.build_files.items():
            if path.startswith("context/"):
                _, agent_id, key = path.split("/", 2)
                by_agent.setdefault(agent_id, {})[key] = text
        return by_agent

    def config_maps(self) -> list[dict[str, Any]]:
        """The build as ConfigMaps; the sidecar checks them against digest.json at start, so a
        ConfigMap edited or left over from another build stops it with the file it names."""
        labels = {"app.kubernetes.io/part-of": "clawpod", "app.kubernetes.io/managed-by": "clawc"}
        maps = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": BUILD_CONFIGMAP, "labels": labels},
                "data": {
                    "sidecar.json": self.build_files["sidecar.json"],
                    "digest.json": self.build_files["digest.json"],
                },
            }
        ]
        for agent_id, files in self.context_files().items():
            maps.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"claw-context-{agent_id}", "labels": labels},
                    "data": dict(sorted(files.items())),
                }
            )
        for config_map in maps:
            size = sum(len(text.encode()) for text in config_map["data"].values())
            if size > MAX_CONFIGMAP_BYTES:
                raise CompileError(
                    f"ConfigMap {config_map['metadata']['name']} would hold {size} bytes; the "
                    f"API server refuses more than {MAX_CONFIGMAP_BYTES}: grant that agent fewer "
                    "tools, or split it into agents with narrower grants"
                )
        return maps

    # -- network policies -------------------------------------------------------------------

    def policy(self, name: str, selector: dict[str, Any], **rules: Any) -> dict[str, Any]:
        types = [kind for kind in ("Ingress", "Egress") if kind.lower() in rules]
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "clawpod"}},
            "spec": {"podSelector": selector, "policyTypes": types, **rules},
        }

    def operator_peers(self) -> list[dict[str, Any]]:
        """The pod file's ``operator-access``, or the namespaces labelled for operators."""
        peers = self.pod.claw.operator_access
        if not peers:
            return [{"namespaceSelector": {"matchLabels": {OPERATOR_LABEL: "true"}}}]
        result: list[dict[str, Any]] = []
        for peer in peers:
            entry: dict[str, Any] = {}
            if peer.namespace_labels:
                entry["namespaceSelector"] = {"matchLabels": dict(peer.namespace_labels)}
            if peer.pod_labels:
                entry["podSelector"] = {"matchLabels": dict(peer.pod_labels)}
            result.append(entry)
        return result

    def network_policies(self) -> list[dict[str, Any]]:
        """Default deny, then one policy per side of each compose network."""
        sidecar = self.component("sidecar")
        agents = self.component("agent")
        tools = [w for w in self.workloads if w.role == "tool"]
        tool_ports = sorted({p for w in tools for p in w.tool_ports})
        policies = [
            self.policy("claw-default-deny", {}, ingress=[], egress=[]),
            # claw-agents: agents reach the sidecar's agent port (and DNS), nothing else.
            self.policy(
                "claw-agents",
                agents,
                egress=[
                    {"to": [{"podSelector": sidecar}], "ports": [_tcp(AGENT_PORT)]},
                    DNS_EGRESS,
                ],
            ),
            self.policy(
                "claw-agents-sidecar",
                sidecar,
                ingress=[{"from": [{"podSelector": agents}], "ports": [_tcp(AGENT_PORT)]}],
            ),
            # claw-admin: the operator port, from namespaces labelled for operators only.
            self.policy(
                "claw-admin",
                sidecar,
                ingress=[{"from": self.operator_peers(), "ports": [_tcp(ADMIN_PORT)]}],
            ),
            # claw-egress: the sidecar reaches providers on public addresses only.
            self.policy(
                "claw-egress",
                sidecar,
                egress=[
                    {
                        "to": [
                            {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(NON_PUBLIC_V4)}},
                            {"ipBlock": {"cidr": "::/0", "except": list(NON_PUBLIC_V6)}},
                        ]
                    },
                    DNS_EGRESS,
                ],
            ),
        ]
        if tools:
            # claw-tools: tool services are reached by the sidecar, and by nothing else.
            policies.append(
                self.policy(
                    "claw-tools",
                    self.component("tool"),
                    ingress=[{"from": [{"podSelector": sidecar}], "ports": _tcps(tool_ports)}],
                )
            )
            policies.append(
                self.policy(
                    "claw-tools-sidecar",
                    sidecar,
                    egress=[
                        {
                            "to": [{"podSelector": {"matchLabels": self.selector(w.name)}}],
                            "ports": _tcps(sorted(w.tool_ports)),
                        }
                        for w in tools
                    ],
                )
            )
        for index, peer in enumerate(self.pod.claw.operator_access or []):
            if not peer.namespace_labels:
                # Operator Pods in the pod's own namespace are under its default deny too.
                policies.append(
                    self.policy(
                        f"claw-admin-operators-{index}",
                        {"matchLabels": dict(peer.pod_labels or {})},
                        egress=[
                            {"to": [{"podSelector": sidecar}], "ports": [_tcp(ADMIN_PORT)]},
                            DNS_EGRESS,
                        ],
                    )
                )
        for network, internal in self.networks.items():
            policies.append(self.pod_network_policy(network, internal))
        return policies

    def pod_network_policy(self, network: str, internal: bool) -> dict[str, Any]:
        """A network of the pod's own (or an agent's surface): its members reach each other on
        every port, as on a compose network; one that is not internal also reaches public
        addresses."""
        members = {"matchLabels": {NETWORK_LABEL + network: "true"}}
        egress: list[dict[str, Any]] = [{"to": [{"podSelector": members}]}, DNS_EGRESS]
        if not internal:
            egress.append(
                {
                    "to": [
                        {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(NON_PUBLIC_V4)}},
                        {"ipBlock": {"cidr": "::/0", "except": list(NON_PUBLIC_V6)}},
                    ]
                }
            )
        name = f"claw-net-{namespace_name(network)}"[:63].rstrip("-")
        return self.policy(
            name, members, ingress=[{"from": [{"podSelector": members}]}], egress=egress
        )

    # -- the folder -------------------------------------------------------------------------

    def namespace_object(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": self.namespace,
                "labels": {
                    "app.kubernetes.io/instance": self.namespace,
                    "app.kubernetes.io/part-of": "clawpod",
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            },
        }

    def secrets_example(self) -> list[dict[str, Any]]:
        """Every Secret and key the deployment reads, with empty values to fill in."""
        sidecar = next(w for w in self.workloads if w.role == "sidecar")
        keys = sorted(self.secret_keys | {n for n in sidecar.environment})
        secrets = [_secret(CREDENTIALS_SECRET, keys)]
        secrets += [_secret(name, keys) for name, keys in sorted(self.agent_secrets.items())]
        return secrets

    def documents(self) -> dict[str, list[dict[str, Any]]]:
        """File name under ``k8s/`` -> the objects it holds."""
        objects: dict[str, list[dict[str, Any]]] = {"namespace.yaml": [self.namespace_object()]}
        objects["build.yaml"] = self.config_maps()
        for workload in self.workloads:
            if workload.role == "sidecar":
                objects["sidecar.yaml"] = self.sidecar(workload)
                continue
            items = [self.controller(workload)]
            if workload.ports:
                items.append(self.service(workload))
            objects[f"{workload.role}-{workload.name}.yaml"] = items
        objects["network-policies.yaml"] = self.network_policies()
        self.warnings.append(
            "kubernetes: agents are kept from tool services, the operator port and the "
            "internet by NetworkPolicies only: the cluster's network plugin must enforce them "
            "(Calico, Cilium and most others do; flannel alone ignores them)"
        )
        if self.rootless_unknown:
            self.warnings.append(
                "kubernetes: the restricted Pod Security profile runs nothing as root; these "
                "services name no numeric user, so their images must declare a non-root one: "
                + ", ".join(self.rootless_unknown)
            )
        return objects


def _tcp(port: int) -> dict[str, Any]:
    return {"protocol": "TCP", "port": port}


def _tcps(ports: list[int]) -> list[dict[str, Any]]:
    return [_tcp(port) for port in ports]


def _secret(name: str, keys: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "Opaque",
        "stringData": {key: "" for key in keys},
    }


def kubernetes_files(
    pod: CompiledPod,
    document: dict[str, Any],
    build_files: dict[str, str],
    version: str,
    dump: Any,
) -> tuple[dict[str, str], list[str]]:
    """The ``k8s/`` files (path relative to the build -> text) and the compile warnings."""
    target = KubernetesTarget(pod, document, build_files, version)
    documents = target.documents()
    header = f"# Generated by clawc {version} (pod {pod.name}); do not edit.\n"
    files = {f"k8s/{name}": header + dump_all(objects, dump) for name, objects in documents.items()}
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": target.namespace,
        "resources": list(documents),
    }
    files["k8s/kustomization.yaml"] = header + dump(kustomization)
    files["k8s/secrets.example.yaml"] = (
        header
        + "# Every Secret the pod reads, keys without values. Create them with kubectl create "
        "secret (docs/kubernetes.md),\n# or fill this copy in and apply it; never commit values.\n"
        + dump_all(
            [
                {**s, "metadata": {**s["metadata"], "namespace": target.namespace}}
                for s in target.secrets_example()
            ],
            dump,
        )
    )
    return files, target.warnings


def dump_all(objects: list[dict[str, Any]], dump: Any) -> str:
    return "---\n".join(dump(obj) for obj in objects)
