"""A reachability model of Kubernetes NetworkPolicies (networking.k8s.io/v1), in pure Python over
the emitted YAML: may a connection from one endpoint to another, on a port, be opened?

The semantics modelled (from the API reference): a Pod selected by no policy of a direction is
open in that direction; once selected, only what some rule of a selecting policy allows gets
through; a connection needs the source's egress and the destination's ingress. Peers are a
podSelector (in the policy's namespace), a namespaceSelector (every Pod of matching
namespaces), both (matching Pods of matching namespaces), or an ipBlock (cidr minus except).
An absent or empty ``from``/``to`` matches everything, an absent or empty ``ports`` every port.
As most CNIs do, ipBlocks are applied to addresses outside the cluster, not to Pod addresses.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PodRef:
    name: str
    namespace: str
    labels: tuple[tuple[str, str], ...]

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass(frozen=True)
class External:
    address: str


Endpoint = PodRef | External


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


@dataclass
class Cluster:
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> labels
    pods: list[PodRef] = field(default_factory=list)
    policies: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (namespace, spec)

    def add_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        self.namespaces[name] = {"kubernetes.io/metadata.name": name, **(labels or {})}

    def add_pod(self, name: str, namespace: str, labels: dict[str, str]) -> PodRef:
        pod = PodRef(name, namespace, tuple(sorted(labels.items())))
        self.pods.append(pod)
        return pod

    def add_policy(self, namespace: str, policy: dict[str, Any]) -> None:
        assert policy["kind"] == "NetworkPolicy"
        self.policies.append((namespace, policy["spec"]))

    def _peer_matches(self, peer: dict[str, Any], namespace: str, other: Endpoint) -> bool:
        if "ipBlock" in peer:
            if isinstance(other, PodRef):
                return False
            address = ipaddress.ip_address(other.address)
            block = peer["ipBlock"]
            cidr = ipaddress.ip_network(block["cidr"])
            if address.version != cidr.version or address not in cidr:
                return False
            return not any(
                address in ipaddress.ip_network(e)
                for e in block.get("except") or []
                if ipaddress.ip_network(e).version == address.version
            )
        if isinstance(other, External):
            return False
        if "namespaceSelector" in peer:
            if not selects(peer["namespaceSelector"], self.namespaces[other.namespace]):
                return False
        elif other.namespace != namespace:
            return False
        if "podSelector" in peer:
            return selects(peer["podSelector"], other.label_map)
        return True

    @staticmethod
    def _port_matches(rule: dict[str, Any], port: int, protocol: str) -> bool:
        ports = rule.get("ports")
        if not ports:
            return True
        for entry in ports:
            if entry.get("protocol", "TCP") != protocol:
                continue
            if "port" not in entry:
                return True
            start = entry["port"]
            assert isinstance(start, int), "named ports are not modelled"
            if start <= port <= entry.get("endPort", start):
                return True
        return False

    def _allowed(
        self, pod: PodRef, direction: str, other: Endpoint, port: int, protocol: str
    ) -> bool:
        kind, rules_key, peers_key = (
            ("Egress", "egress", "to") if direction == "egress" else ("Ingress", "ingress", "from")
        )
        selecting = [
            (namespace, spec)
            for namespace, spec in self.policies
            if namespace == pod.namespace
            and kind in spec.get("policyTypes", ["Ingress"])
            and selects(spec["podSelector"], pod.label_map)
        ]
        if not selecting:
            return True
        for namespace, spec in selecting:
            for rule in spec.get(rules_key) or []:
                peers = rule.get(peers_key)
                peer_ok = not peers or any(self._peer_matches(p, namespace, other) for p in peers)
                if peer_ok and self._port_matches(rule, port, protocol):
                    return True
        return False

    def can_connect(
        self, source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP"
    ) -> bool:
        if isinstance(source, PodRef) and not self._allowed(
            source, "egress", destination, port, protocol
        ):
            return False
        if isinstance(destination, PodRef):
            return self._allowed(destination, "ingress", source, port, protocol)
        return True
