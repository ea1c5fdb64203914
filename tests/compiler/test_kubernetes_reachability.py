"""The NetworkPolicies of ``--target kubernetes`` evaluated by a reachability model
(tests/support/netpol.py) for the example pod and generated pods: agents reach only the
sidecar's agent port and DNS; tool services are reached by the sidecar and by no agent or
outside Pod; the operator port only from namespaces labelled for operators; agents have no
internet; the sidecar reaches public addresses but no private, link-local or metadata range.
The same questions asked of the compose target's networks give the same answers, except where
Kubernetes is deliberately stricter (listed in STRICTER)."""

from __future__ import annotations

import io
import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from clawpod.cli.clawc import main
from clawpod.compiler.pod_file.reserved import ADMIN_NETWORK, ADMIN_PORT, SIDECAR_SERVICE
from tests.compiler.test_kubernetes import EXAMPLE, SIZES, VERSIONS, compile_k8s
from tests.support.bigpod import write_big_pod
from tests.support.netpol import Cluster, External, PodRef

AGENT_PORT = 8080
PUBLIC = ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"]
NON_PUBLIC = [
    "10.1.2.3", "172.16.0.1", "172.31.255.254", "192.168.1.1", "169.254.169.254", "127.0.0.1",
    "100.64.0.1", "0.0.0.1", "fd00:ec2::254", "fe80::1", "::1", "::ffff:10.0.0.1",
]  # fmt: skip
OPERATOR_NS, OTHER_NS = "ops", "elsewhere"


@dataclass
class Deployed:
    """One compiled pod, on a model cluster and as its compose networks."""

    cluster: Cluster
    pods: dict[str, PodRef]  # service name -> its Pod
    roles: dict[str, str]  # service name -> agent | tool | service | sidecar
    ports: dict[str, list[int]]  # service name -> its container ports
    compose: dict[str, Any]
    operator: PodRef
    outsider: PodRef
    dns: PodRef


def deploy(pod_file: Path, out: Path) -> Deployed:
    objects, _ = compile_k8s(pod_file, out)
    cluster = Cluster()
    (kustomization,) = objects["kustomization.yaml"]
    namespace = kustomization["namespace"]
    cluster.add_namespace(namespace)
    cluster.add_namespace(OPERATOR_NS, {"clawpod.io/operator": "true"})
    cluster.add_namespace(OTHER_NS)
    cluster.add_namespace("kube-system")
    pods: dict[str, PodRef] = {}
    roles: dict[str, str] = {}
    ports: dict[str, list[int]] = {}
    for items in objects.values():
        for obj in items:
            if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
                labels = obj["spec"]["template"]["metadata"]["labels"]
                name = obj["metadata"]["name"]
                pods[name] = cluster.add_pod(name, namespace, labels)
                roles[name] = labels["app.kubernetes.io/component"]
                (container,) = obj["spec"]["template"]["spec"]["containers"]
                ports[name] = [p["containerPort"] for p in container.get("ports", [])]
            elif obj["kind"] == "NetworkPolicy":
                cluster.add_policy(namespace, obj)
    # The compose target of the same pod file, for the same questions.
    compose_out = out.parent / "compose-build"
    code = main(
        ["compile", str(pod_file), "-o", str(compose_out), "--sidecar-image", "x"],
        stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    assert code == 0
    compose = yaml.safe_load((compose_out / "compose.yml").read_text())
    return Deployed(
        cluster,
        pods,
        roles,
        ports,
        compose,
        operator=cluster.add_pod("console", OPERATOR_NS, {"app": "console"}),
        outsider=cluster.add_pod("intruder", OTHER_NS, {"app": "intruder"}),
        dns=cluster.add_pod("coredns", "kube-system", {"k8s-app": "kube-dns"}),
    )


# -- the compose side -----------------------------------------------------------------------


def compose_networks(compose: dict[str, Any], service: str) -> set[str]:
    networks = compose["services"][service].get("networks") or ["default"]
    return set(networks)


def compose_listens(compose: dict[str, Any], service: str, port: int) -> set[str]:
    """The networks on which ``service`` accepts ``port``: the sidecar binds its operator
    listener to its claw-admin address only, everything else binds every address."""
    networks = compose_networks(compose, service)
    if service == SIDECAR_SERVICE and port == ADMIN_PORT:
        return {ADMIN_NETWORK}
    return networks


def compose_connects(compose: dict[str, Any], source: str, destination: str, port: int) -> bool:
    shared = compose_networks(compose, source) & compose_listens(compose, destination, port)
    return bool(shared)


def compose_internet(compose: dict[str, Any], service: str) -> bool:
    declared = compose.get("networks") or {}
    return any(
        not (declared.get(n) or {}).get("internal") for n in compose_networks(compose, service)
    )


# Where Kubernetes answers "no" and compose "yes", on purpose: NetworkPolicies can say what
# compose networks cannot. (source role, destination role, port or None for any.)
STRICTER = {
    ("agent", "agent", None): "agents share claw-agents in compose; only the sidecar needs it",
    ("sidecar", "agent", None): "the sidecar answers agents, it never calls one",
    ("tool", "sidecar", AGENT_PORT): "tools share claw-tools with the sidecar; none calls it",
    ("service", "sidecar", AGENT_PORT): "as tools",
}


def stricter(roles: dict[str, str], source: str, destination: str, port: int) -> bool:
    pair = (roles[source], roles[destination])
    return (*pair, None) in STRICTER or (*pair, port) in STRICTER


# -- the pods under test --------------------------------------------------------------------


VARIED_SEEDS = (1, 2, 3)


@pytest.fixture(
    scope="module",
    params=[None, *SIZES, *VARIED_SEEDS],
    ids=[
        "example",
        *(f"{a}-agents-{s}-services" for a, s in SIZES),
        *(f"varied-{seed}" for seed in VARIED_SEEDS),
    ],
)
def deployed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Deployed:
    root = tmp_path_factory.mktemp("reach")
    if request.param is None:
        return deploy(EXAMPLE, root / "build")
    if isinstance(request.param, int):
        return deploy(write_varied_pod(root / "pod", request.param), root / "build")
    agents, services = request.param
    pod = write_big_pod(root / "pod", agents=agents, services=services, tools=1)
    return deploy(pod, root / "build")


def write_varied_pod(directory: Path, seed: int) -> Path:
    """A generated pod with the shapes a real one has: native and counted agents, an agent
    with a surface, tool services on several ports and a network of their own with a database
    no agent is granted."""
    rng = random.Random(seed)
    agents, services = rng.randint(1, 50), rng.randint(1, 20)
    pod = write_big_pod(directory, agents=agents, services=services, tools=1)
    data = yaml.safe_load(pod.read_text())
    data["services"]["db"] = {"image": "example/db", "expose": ["5432"], "networks": ["backend"]}
    data["networks"] = {"backend": {"internal": True}}
    for index in range(services):
        service = data["services"][f"svc{index}"]
        service["expose"] = [str(rng.choice([80, 4000, 8000, 8443]))]
        if rng.random() < 0.5:
            service["networks"] = ["default", "backend"]
    for index in range(agents):
        claw = data["services"][f"agent{index}"]["x-claw"]
        if rng.random() < 0.3:
            claw["mode"] = "native"
        if rng.random() < 0.2:
            claw["agent"] = {"count": rng.randint(2, 3)}
    data["services"]["agent0"]["x-claw"]["surfaces"] = ["service://db"]
    pod.write_text(yaml.safe_dump(data, sort_keys=False))
    return pod


def surfaces_of(deployed: Deployed, agent: str) -> set[str]:
    """The services an agent may reach directly in compose (its surface networks)."""
    mine = compose_networks(deployed.compose, agent) - {"claw-agents"}
    return {
        name
        for name in deployed.compose["services"]
        if name != agent and mine & compose_networks(deployed.compose, name)
    }


def of_role(deployed: Deployed, role: str) -> list[str]:
    return [name for name, r in deployed.roles.items() if r == role]


def test_agents_reach_only_the_sidecars_agent_port_dns_and_their_surfaces(
    deployed: Deployed,
) -> None:
    cluster, pods = deployed.cluster, deployed.pods
    sidecar = pods[SIDECAR_SERVICE]
    for agent in of_role(deployed, "agent"):
        source = pods[agent]
        assert cluster.can_connect(source, sidecar, AGENT_PORT)
        assert not cluster.can_connect(source, sidecar, ADMIN_PORT)
        assert cluster.can_connect(source, deployed.dns, 53, "UDP")
        surfaces = surfaces_of(deployed, agent)  # what the pod file lets it reach directly
        for name, other in pods.items():
            if name == agent:
                continue
            for port in {*deployed.ports[name], AGENT_PORT, 80, 443}:
                allowed = (other == sidecar and port == AGENT_PORT) or name in surfaces
                assert cluster.can_connect(source, other, port) == allowed, (agent, name, port)
        for address in PUBLIC + NON_PUBLIC:
            assert not cluster.can_connect(source, External(address), 443), (agent, address)
        assert not cluster.can_connect(source, deployed.operator, 80)


def test_tool_services_are_reached_by_the_sidecar_and_no_agent_or_outsider(
    deployed: Deployed,
) -> None:
    cluster, pods = deployed.cluster, deployed.pods
    for tool in of_role(deployed, "tool"):
        for port in deployed.ports[tool]:
            assert cluster.can_connect(pods[SIDECAR_SERVICE], pods[tool], port)
            for agent in of_role(deployed, "agent"):
                assert not cluster.can_connect(pods[agent], pods[tool], port)
            for outsider in (deployed.operator, deployed.outsider):
                assert not cluster.can_connect(outsider, pods[tool], port)
            for address in PUBLIC:
                assert not cluster.can_connect(External(address), pods[tool], port)


def test_the_operator_port_only_from_operator_namespaces(deployed: Deployed) -> None:
    cluster, sidecar = deployed.cluster, deployed.pods[SIDECAR_SERVICE]
    assert cluster.can_connect(deployed.operator, sidecar, ADMIN_PORT)
    assert not cluster.can_connect(deployed.outsider, sidecar, ADMIN_PORT)
    assert not cluster.can_connect(deployed.outsider, sidecar, AGENT_PORT)
    assert not cluster.can_connect(External(PUBLIC[0]), sidecar, ADMIN_PORT)
    for name, pod in deployed.pods.items():
        if name != SIDECAR_SERVICE:
            assert not cluster.can_connect(pod, sidecar, ADMIN_PORT), name


def test_the_sidecar_reaches_public_addresses_only(deployed: Deployed) -> None:
    cluster, sidecar = deployed.cluster, deployed.pods[SIDECAR_SERVICE]
    for address in PUBLIC:
        assert cluster.can_connect(sidecar, External(address), 443)
    for address in NON_PUBLIC:
        assert not cluster.can_connect(sidecar, External(address), 443), address
    assert not cluster.can_connect(sidecar, deployed.outsider, 80)
    for agent in of_role(deployed, "agent"):
        assert not cluster.can_connect(sidecar, deployed.pods[agent], AGENT_PORT)


def test_the_model_agrees_with_the_compose_networks(deployed: Deployed) -> None:
    cluster, pods, compose = deployed.cluster, deployed.pods, deployed.compose
    assert set(pods) == set(compose["services"])
    for source, destination in itertools.permutations(pods, 2):
        # The ports the destination listens on: its declared ports (the sidecar's two).
        for port in deployed.ports[destination]:
            in_k8s = cluster.can_connect(pods[source], pods[destination], port)
            in_compose = compose_connects(compose, source, destination, port)
            if in_k8s != in_compose:
                assert not in_k8s and stricter(deployed.roles, source, destination, port), (
                    source, destination, port, in_k8s, in_compose
                )  # fmt: skip
    for name, pod in pods.items():
        to_public = cluster.can_connect(pod, External(PUBLIC[0]), 443)
        assert to_public == compose_internet(compose, name), name


def test_operator_access_names_who_reaches_the_operator_port(tmp_path: Path) -> None:
    pod = write_big_pod(tmp_path / "pod", agents=2, services=1, tools=1)
    data = yaml.safe_load(pod.read_text())
    data["x-claw"]["operator-access"] = [
        {"namespace-labels": {"team": "desk-ops"}, "pod-labels": {"app": "console"}},
        {"pod-labels": {"app": "approver"}},
    ]
    pod.write_text(yaml.safe_dump(data))
    deployed = deploy(pod, tmp_path / "build")
    cluster, sidecar = deployed.cluster, deployed.pods[SIDECAR_SERVICE]
    cluster.add_namespace("desk-ops", {"team": "desk-ops"})
    console = cluster.add_pod("console", "desk-ops", {"app": "console"})
    bystander = cluster.add_pod("other", "desk-ops", {"app": "other"})
    approver = cluster.add_pod("approver", sidecar.namespace, {"app": "approver"})
    assert cluster.can_connect(console, sidecar, ADMIN_PORT)
    assert cluster.can_connect(approver, sidecar, ADMIN_PORT)
    assert not cluster.can_connect(bystander, sidecar, ADMIN_PORT)
    assert not cluster.can_connect(console, sidecar, AGENT_PORT)
    # Naming operators replaces the default: the labelled namespace no longer gets in.
    assert not cluster.can_connect(deployed.operator, sidecar, ADMIN_PORT)


def test_an_operator_peer_must_name_someone(tmp_path: Path) -> None:
    pod = write_big_pod(tmp_path / "pod", agents=1, services=1, tools=1)
    data = yaml.safe_load(pod.read_text())
    data["x-claw"]["operator-access"] = [{}]
    pod.write_text(yaml.safe_dump(data))
    err = io.StringIO()
    code = main(["compile", str(pod), "-o", str(tmp_path / "b")], stdout=io.StringIO(), stderr=err)
    assert code != 0 and "name namespace-labels, pod-labels or both" in err.getvalue()


@pytest.mark.parametrize("seed", VARIED_SEEDS)
def test_varied_pods_validate_strictly(tmp_path: Path, seed: int) -> None:
    objects, _ = compile_k8s(write_varied_pod(tmp_path / "pod", seed), tmp_path / "build")
    for items in (v for k, v in objects.items() if k != "kustomization.yaml"):
        for obj in items:
            for version in VERSIONS:
                kubernetes_validate.validate(obj, version, strict=True)
