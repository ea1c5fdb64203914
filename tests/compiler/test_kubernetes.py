"""``clawc compile --target kubernetes`` (SPEC §13.2): the ``k8s/`` folder of the example pod and
of generated pods validates strictly against offline Kubernetes schemas (1.29, 1.33, the newest
the schema package ships), follows the restricted Pod Security profile, carries no credential
value, and ships the build as ConfigMaps the sidecar checks against digest.json."""

from __future__ import annotations

import functools
import io
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from clawpod.cli.clawc import main
from clawpod.sidecar.manifest import BuildError, load_build
from tests.compiler.conftest import REPO
from tests.support.bigpod import write_big_pod

# kubernetes-validate reads and parses its schema files (the definitions are megabytes) on
# every call, about 30 ms each; the files never change within a run, so read each once.
kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(
    kubernetes_validate.utils.schema_contents
)
EXAMPLE = REPO / "compose" / "examples" / "trading-desk" / "pod.yml"
VERSIONS = ("1.29.0", "1.33.0", kubernetes_validate.latest_version())
SIZES = [(1, 1), (3, 2), (12, 7), (50, 20)]  # (agents, services)
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")


def compile_k8s(pod: Path, out: Path) -> tuple[dict[str, list[dict[str, Any]]], str]:
    """Compile ``pod`` for Kubernetes into ``out``; the objects of each k8s/ file, and stderr."""
    err = io.StringIO()
    code = main(
        ["compile", str(pod), "-o", str(out), "--target", "kubernetes", "--sidecar-image",
         "registry.example/clawpod/sidecar:1"],
        stdout=io.StringIO(), stderr=err,
    )  # fmt: skip
    assert code == 0, err.getvalue()
    objects = {
        path.name: [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        for path in sorted((out / "k8s").glob("*.yaml"))
    }
    return objects, err.getvalue()


def compile_error(pod: Path, out: Path) -> str:
    """What ``clawc compile --target kubernetes`` says when it refuses ``pod``."""
    err = io.StringIO()
    code = main(
        ["compile", str(pod), "-o", str(out), "--target", "kubernetes", "--sidecar-image", "x"],
        stdout=io.StringIO(), stderr=err,
    )  # fmt: skip
    assert code == 1, err.getvalue()
    return err.getvalue()


def all_objects(objects: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [o for name, items in objects.items() if name != "kustomization.yaml" for o in items]


def pod_specs(objects: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [
        o["spec"]["template"]["spec"] for o in all_objects(objects) if o["kind"] in WORKLOAD_KINDS
    ]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    objects, _ = compile_k8s(EXAMPLE, tmp_path_factory.mktemp("example") / "build")
    return objects


@pytest.mark.parametrize("version", VERSIONS)
def test_the_example_validates_strictly(
    example: dict[str, list[dict[str, Any]]], version: str
) -> None:
    for obj in all_objects(example):
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize(("agents", "services"), SIZES)
def test_generated_pods_validate_strictly(tmp_path: Path, agents: int, services: int) -> None:
    pod = write_big_pod(tmp_path / "pod", agents=agents, services=services, tools=2)
    objects, _ = compile_k8s(pod, tmp_path / "build")
    kinds = [o["kind"] for o in all_objects(objects)]
    assert kinds.count("Deployment") == services
    assert kinds.count("Job") == agents
    assert kinds.count("StatefulSet") == 1
    for version in VERSIONS:
        for obj in all_objects(objects):
            kubernetes_validate.validate(obj, version, strict=True)


def test_a_misspelt_field_fails_validation(example: dict[str, list[dict[str, Any]]]) -> None:
    """The validation above can fail: strict mode refuses a field the schema does not know."""
    deployment = next(o for o in all_objects(example) if o["kind"] == "Deployment")
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 1}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_kustomization_lists_every_resource_but_the_secrets_example(
    example: dict[str, list[dict[str, Any]]],
) -> None:
    (kustomization,) = example["kustomization.yaml"]
    assert kustomization["namespace"] == "trading-desk"
    expected = set(example) - {"kustomization.yaml", "secrets.example.yaml"}
    assert set(kustomization["resources"]) == expected
    (namespace,) = example["namespace.yaml"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_every_container_runs_under_the_restricted_profile(
    example: dict[str, list[dict[str, Any]]],
) -> None:
    for spec in pod_specs(example):
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert security["runAsNonRoot"] is True
    (sidecar,) = [s for s in pod_specs(example) if s["containers"][0]["name"] == "claw-sidecar"]
    assert sidecar["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_sidecar_is_its_own_pod_with_one_replica_probes_and_a_claim(
    example: dict[str, list[dict[str, Any]]],
) -> None:
    (statefulset,) = [o for o in all_objects(example) if o["kind"] == "StatefulSet"]
    spec = statefulset["spec"]
    assert spec["replicas"] == 1
    assert spec["volumeClaimTemplates"][0]["metadata"]["name"] == "claw-state"
    (container,) = spec["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "agents"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "operator"}
    for workload in (o for o in all_objects(example) if o["kind"] in ("Deployment", "Job")):
        names = [c["name"] for c in workload["spec"]["template"]["spec"]["containers"]]
        assert names == [workload["metadata"]["name"]]  # no sidecar container beside an agent
    labels = statefulset["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "sidecar"
    assert labels["app.kubernetes.io/part-of"] == "clawpod"


def _env_refs(objects: dict[str, list[dict[str, Any]]]) -> set[tuple[str, str]]:
    return {
        (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for spec in pod_specs(objects)
        for container in spec["containers"]
        for e in container.get("env", [])
        if "valueFrom" in e
    }


def test_credentials_only_by_reference_and_every_key_in_the_example_secrets(
    tmp_path: Path,
) -> None:
    out = tmp_path / "build"
    objects, _ = compile_k8s(EXAMPLE, out)
    text = "".join(p.read_text() for p in (out / "k8s").glob("*.yaml"))
    tokens = [
        line.partition("=")[2]
        for env in (out / "agents").glob("*.env")
        for line in env.read_text().splitlines()
        if line.startswith("CLAW_AGENT_TOKEN=")
    ]
    assert len(tokens) == 2 and not any(token in text for token in tokens)
    listed = {
        (s["metadata"]["name"], key)
        for s in objects["secrets.example.yaml"]
        for key, value in s["stringData"].items()
        if value == ""
    }
    assert _env_refs(objects) == listed
    assert ("claw-credentials", "OPENAI_API_KEY") in listed
    assert ("claw-agent-trader", "CLAW_AGENT_TOKEN") in listed
    for spec in pod_specs(objects):
        for container in spec["containers"]:
            for entry in container.get("env", []):
                assert (
                    "KEY" not in entry["name"]
                    or "valueFrom" in entry
                    or "BASE_URL" in entry["name"]
                )


def _projected(objects: dict[str, list[dict[str, Any]]], root: Path) -> None:
    """Lay the ConfigMaps out as the sidecar's projected volume does."""
    maps = {o["metadata"]["name"]: o["data"] for o in objects["build.yaml"]}
    (statefulset,) = [o for o in all_objects(objects) if o["kind"] == "StatefulSet"]
    volumes = statefulset["spec"]["template"]["spec"]["volumes"]
    (build,) = [v for v in volumes if v["name"] == "claw-build"]
    for source in build["projected"]["sources"]:
        data = maps[source["configMap"]["name"]]
        for item in source["configMap"]["items"]:
            path = root / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(data[item["key"]])


def test_the_build_configmaps_load_and_are_checked_against_the_digest(tmp_path: Path) -> None:
    objects, _ = compile_k8s(EXAMPLE, tmp_path / "build")
    mounted = tmp_path / "mounted"
    _projected(objects, mounted)
    build = load_build(mounted)
    assert set(build.agents) == {"analyst", "trader"}
    # A ConfigMap edited after the build (or left from another build) stops the sidecar.
    context = next(o for o in objects["build.yaml"] if o["metadata"]["name"].endswith("trader"))
    context["data"]["tools.json"] = context["data"]["tools.json"].replace("get_quote", "get_quota")
    _projected(objects, mounted)
    with pytest.raises(BuildError, match=re.escape("context/trader/tools.json: modified")):
        load_build(mounted)


def test_compose_stays_the_default_and_writes_no_k8s(tmp_path: Path) -> None:
    out = tmp_path / "build"
    assert (
        main(["compile", str(EXAMPLE), "-o", str(out)], stdout=io.StringIO(), stderr=io.StringIO())
        == 0
    )
    assert (out / "compose.yml").exists() and not (out / "k8s").exists()


def test_warnings_name_what_the_target_cannot_enforce(tmp_path: Path) -> None:
    _, err = compile_k8s(EXAMPLE, tmp_path / "build")
    assert "the cluster's network plugin must enforce them" in err
    # Images pulled by name: nothing on this machine says which user they run as.
    pod = write_big_pod(tmp_path / "pod", agents=1, services=1, tools=1)
    _, err = compile_k8s(pod, tmp_path / "big")
    assert "name no numeric user, so their images must declare a non-root one: svc0, agent0" in err


def test_the_user_a_build_contexts_dockerfile_declares_is_the_pods_user(
    example: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Every example Dockerfile ends as USER 65534:65534: no warning, and Kubernetes is told."""
    _, err = compile_k8s(EXAMPLE, tmp_path / "build")
    assert "numeric user" not in err
    for spec in pod_specs(example):
        if spec["containers"][0]["name"] != "claw-sidecar":
            assert spec["securityContext"]["runAsUser"] == 65534
            assert spec["securityContext"]["runAsGroup"] == 65534


def test_a_later_stage_without_user_is_not_read_as_the_first_stages(tmp_path: Path) -> None:
    pod = write_big_pod(tmp_path / "pod", agents=1, services=1, tools=1)
    (tmp_path / "pod" / "agent").mkdir()
    (tmp_path / "pod" / "agent" / "Dockerfile").write_text(
        "FROM python:3.11-slim AS build\nUSER 1000\n"
        "FROM python:3.11-slim\nCOPY --from=build /a /a\n"
    )
    data = yaml.safe_load(pod.read_text())
    data["services"]["agent0"]["build"] = "./agent"
    pod.write_text(yaml.safe_dump(data, sort_keys=False))
    objects, err = compile_k8s(pod, tmp_path / "build")
    assert "numeric user, so their images must declare a non-root one: svc0, agent0" in err
    (job,) = [o for o in all_objects(objects) if o["metadata"]["name"] == "agent0"]
    assert "runAsUser" not in job["spec"]["template"]["spec"]["securityContext"]


def test_agents_run_once_as_compose_runs_them(example: dict[str, list[dict[str, Any]]]) -> None:
    """A one-shot agent restarted by a Deployment would ask its paid question again, or file
    a new order for approval; compose gives it no restart, and neither does Kubernetes."""
    jobs = {o["metadata"]["name"]: o for o in all_objects(example) if o["kind"] == "Job"}
    assert set(jobs) == {"analyst", "trader"}
    for job in jobs.values():
        assert job["spec"]["backoffLimit"] == 0
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    servers = {o["metadata"]["name"] for o in all_objects(example) if o["kind"] == "Deployment"}
    assert {"trading-api", "market-news", "research-mcp"} <= servers


@pytest.mark.parametrize(
    ("restart", "kind", "policy", "retries"),
    [
        ("on-failure:3", "Job", "OnFailure", 3),
        ("on-failure", "Job", "OnFailure", 6),
        ("always", "Deployment", None, None),
    ],
)
def test_an_agents_compose_restart_carries_over(
    tmp_path: Path, restart: str, kind: str, policy: str | None, retries: int | None
) -> None:
    pod = write_big_pod(tmp_path / "pod", agents=1, services=1, tools=1)
    data = yaml.safe_load(pod.read_text())
    data["services"]["agent0"]["restart"] = restart
    pod.write_text(yaml.safe_dump(data))
    objects, _ = compile_k8s(pod, tmp_path / "build")
    (agent,) = [o for o in all_objects(objects) if o["metadata"]["name"] == "agent0"]
    assert agent["kind"] == kind
    assert agent["spec"]["template"]["spec"].get("restartPolicy") == policy
    assert agent["spec"].get("backoffLimit") == retries
    for version in VERSIONS:
        kubernetes_validate.validate(agent, version, strict=True)


def test_a_service_name_kubernetes_cannot_carry_is_a_compile_error(tmp_path: Path) -> None:
    pod = write_big_pod(tmp_path / "pod", agents=1, services=1, tools=1)
    pod.write_text(pod.read_text().replace("agent0", "Agent_0"))
    assert "'Agent_0' cannot be a Kubernetes Service name" in compile_error(pod, tmp_path / "b")


def test_a_service_may_not_take_the_operator_listeners_name(tmp_path: Path) -> None:
    """Its Service would answer for claw-sidecar-admin: operators' tokens would go to it."""
    pod = write_big_pod(tmp_path / "pod", agents=1, services=1, tools=1)
    data = yaml.safe_load(pod.read_text())
    data["services"]["claw-sidecar-admin"] = data["services"].pop("svc0")
    data["x-claw"]["tools-defaults"] = ["claw-sidecar-admin"]
    pod.write_text(yaml.safe_dump(data))
    assert "'claw-sidecar-admin' is reserved for the sidecar on Kubernetes" in compile_error(
        pod, tmp_path / "b"
    )


def test_a_build_too_large_for_a_configmap_is_a_compile_error(tmp_path: Path) -> None:
    """The API server refuses a ConfigMap over 1 MiB: say so at compile time, naming it."""
    pod = write_big_pod(tmp_path / "pod", agents=1, services=20, tools=60)
    assert "ConfigMap claw-context-agent0 would hold" in compile_error(pod, tmp_path / "b")
