"""``x-claw.shared-limits`` and ``x-claw.budget-groups`` (SPEC §24): checked by clawc, carried to
the sidecar, and the store's URL or password a secret of every target; the store clawc adds
(compose) is reachable by the sidecar alone."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from clawpod.cli.clawc import main
from clawpod.compiler.pod_file.reserved import SIDECAR_SERVICE
from clawpod.sidecar.manifest import load_build
from tests.compiler.conftest import REPO
from tests.compiler.test_kubernetes import EXAMPLE, VERSIONS, all_objects, compile_k8s
from tests.compiler.test_kubernetes_reachability import deploy
from tests.support.netpol import External

EXTERNAL = """  shared-limits: {url-env: REDIS_URL, on-unreachable: fail-local}
  budget-groups:
    desk: {agents: [analyst, trader], usd-per-day: 50}
"""
BUNDLED = """  shared-limits:
    service: {password-env: CLAW_LIMITS_PASSWORD}
  budget-groups:
    desk: {agents: [analyst, trader], tokens-per-day: 100000}
"""


@pytest.fixture
def pod_with(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The example pod with ``claw`` added to its x-claw, in a copy of its tree."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "descriptors", root / "descriptors")
    desk = root / "compose" / "examples" / "trading-desk"
    shutil.copytree(EXAMPLE.parent, desk)

    def write(claw: str) -> Path:
        pod = desk / "pod.yml"
        pod.write_text(EXAMPLE.read_text().replace("x-claw:\n", "x-claw:\n" + claw, 1))
        return pod

    return write


def _compile(pod: Path, out: Path, *target: str) -> tuple[int, str]:
    err = io.StringIO()
    code = main(
        ["compile", str(pod), "-o", str(out), "--sidecar-image", "clawpod/sidecar:1", *target],
        stdout=io.StringIO(),
        stderr=err,
    )
    return code, err.getvalue()


def test_the_sidecar_gets_the_store_and_the_groups_by_agent_id(tmp_path: Path, pod_with) -> None:  # type: ignore[no-untyped-def]
    code, err = _compile(pod_with(EXTERNAL), tmp_path / "out")
    assert code == 0, err
    config = load_build(tmp_path / "out").config
    assert config.shared_limits is not None
    assert (config.shared_limits.url_env, config.shared_limits.on_unreachable) == (
        "REDIS_URL",
        "fail-local",
    )
    assert config.governance is not None and config.governance.budget_groups is not None
    group = config.governance.budget_groups["desk"]
    assert (group.agents, group.usd_per_day, group.tokens_per_day) == (
        ["analyst", "trader"],
        50,
        None,
    )
    compose = yaml.safe_load((tmp_path / "out" / "compose.yml").read_text())
    assert compose["services"]["claw-sidecar"]["environment"]["REDIS_URL"] == "${REDIS_URL}"
    assert "claw-limits" not in compose["services"]  # an external store: nothing added


@pytest.mark.parametrize(
    ("claw", "message"),
    [
        ("  shared-limits: {on-unreachable: fail-closed}\n", "set url-env"),
        (
            "  shared-limits: {url-env: R, service: {password-env: P}}\n",
            "set url-env (an external server) or service",
        ),
        ("  shared-limits: {url-env: R, on-unreachable: retry}\n", "fail-closed"),
        ("  shared-limits: {url-env: 'not a name'}\n", "url-env"),
        ("  budget-groups: {desk: {agents: [nobody], tokens-per-day: 5}}\n", "'nobody' is not"),
        ("  budget-groups: {desk: {agents: [analyst]}}\n", "tokens-per-day, usd-per-day"),
        (
            "  budget-groups: {desk: {agents: [analyst], requests-per-minute: 0}}\n",
            "requests-per-minute",
        ),
        (
            "  budget-groups: {d: {agents: [analyst], tokens-per-day: 5, tokens-per-minute: 9}}\n",
            "tokens-per-minute (9) is more than tokens-per-day (5)",
        ),
        ("  budget-groups: {desk: {agents: [], usd-per-day: 1}}\n", "agents"),
    ],
)
def test_what_clawc_refuses(tmp_path: Path, pod_with, claw: str, message: str) -> None:  # type: ignore[no-untyped-def]
    code, err = _compile(pod_with(claw), tmp_path / "out")
    assert code == 1 and message in err, err


def test_a_groups_rates_reach_the_sidecar(tmp_path: Path, pod_with) -> None:  # type: ignore[no-untyped-def]
    """#51: before, clawc refused ``requests-per-minute`` as an unknown key."""
    claw = EXTERNAL.replace(
        "usd-per-day: 50}", "requests-per-minute: 60, tokens-per-minute: 40000}"
    )
    code, err = _compile(pod_with(claw), tmp_path / "out")
    assert code == 0, err
    config = load_build(tmp_path / "out").config
    assert config.governance is not None and config.governance.budget_groups is not None
    group = config.governance.budget_groups["desk"]
    assert (group.requests_per_minute, group.tokens_per_minute) == (60, 40000)
    assert group.tokens_per_day is None and group.usd_per_day is None


def test_groups_without_a_shared_store_are_warned_about(tmp_path: Path, pod_with) -> None:  # type: ignore[no-untyped-def]
    claw = "  budget-groups: {desk: {agents: [analyst], tokens-per-day: 5}}\n"
    code, err = _compile(pod_with(claw), tmp_path / "out")
    assert code == 0 and "budget-groups without shared-limits" in err


def test_an_agent_may_not_hold_the_stores_url(tmp_path: Path, pod_with) -> None:  # type: ignore[no-untyped-def]
    pod = pod_with(EXTERNAL)
    text = pod.read_text().replace("CLAW_MODEL: gpt-4o-mini\n", "REDIS_URL: x\n", 1)
    pod.write_text(text)
    code, err = _compile(pod, tmp_path / "out")
    assert code == 1 and "REDIS_URL" in err and "shared store" in err, err


def test_the_store_clawc_adds_is_reached_by_the_sidecar_alone(tmp_path: Path, pod_with) -> None:  # type: ignore[no-untyped-def]
    code, err = _compile(pod_with(BUNDLED), tmp_path / "out")
    assert code == 0, err
    compose: dict[str, Any] = yaml.safe_load((tmp_path / "out" / "compose.yml").read_text())
    services = compose["services"]
    store = services["claw-limits"]
    assert store["networks"] == ["claw-limits"]
    assert compose["networks"]["claw-limits"] == {"internal": True}
    on_it = {name for name, s in services.items() if "claw-limits" in (s.get("networks") or [])}
    assert on_it == {"claw-limits", "claw-sidecar"}
    sidecar_env = services["claw-sidecar"]["environment"]
    assert sidecar_env["CLAW_LIMITS_URL"] == ("redis://:${CLAW_LIMITS_PASSWORD}@claw-limits:6379/0")
    assert store["environment"] == {"CLAW_LIMITS_PASSWORD": "${CLAW_LIMITS_PASSWORD}"}
    # The password is read inside the container, never written on a command line.
    assert "$$CLAW_LIMITS_PASSWORD" in store["entrypoint"][2]
    config = load_build(tmp_path / "out").config
    assert config.shared_limits is not None
    assert config.shared_limits.url_env == "CLAW_LIMITS_URL"


@pytest.mark.parametrize("reserved", ["services", "networks", "volumes"])
def test_the_stores_names_are_reserved(tmp_path: Path, pod_with, reserved: str) -> None:  # type: ignore[no-untyped-def]
    pod = pod_with("")
    text = pod.read_text()
    if reserved == "services":
        text = text.replace("services:\n", "services:\n  claw-limits: {image: x}\n", 1)
    else:
        name = "claw-limits-data" if reserved == "volumes" else "claw-limits"
        text += f"{reserved}:\n  {name}: {{}}\n"
    pod.write_text(text)
    code, err = _compile(pod, tmp_path / "out")
    assert code == 1 and "reserved" in err, err


def test_on_kubernetes_only_the_sidecar_reaches_the_store(tmp_path: Path, pod_with) -> None:  # type: ignore[no-untyped-def]
    deployed = deploy(pod_with(BUNDLED), tmp_path / "k8s-build")
    cluster, pods = deployed.cluster, deployed.pods
    store = pods["claw-limits"]
    for name, source in pods.items():
        if name != "claw-limits":
            assert cluster.can_connect(source, store, 6379) == (name == SIDECAR_SERVICE), name
    for outside in (deployed.operator, deployed.outsider):
        assert not cluster.can_connect(outside, store, 6379)
    assert not cluster.can_connect(store, External("93.184.216.34"), 443)
    sidecar = yaml.safe_load_all((tmp_path / "k8s-build" / "k8s" / "sidecar.yaml").read_text())
    env = next(d for d in sidecar if d and d["kind"] == "StatefulSet")["spec"]["template"]
    variables = {e["name"]: e for e in env["spec"]["containers"][0]["env"]}
    assert variables["CLAW_LIMITS_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == (
        "CLAW_LIMITS_PASSWORD"
    )  # a Secret's key, never a value; the URL is made of it in the Pod
    assert variables["CLAW_LIMITS_URL"]["value"] == (
        "redis://:$(CLAW_LIMITS_PASSWORD)@claw-limits:6379/0"
    )
    objects, _ = compile_k8s(pod_with(BUNDLED), tmp_path / "k8s-again")
    for version in VERSIONS:
        for obj in all_objects(objects):
            kubernetes_validate.validate(obj, version, strict=True)


def test_on_swarm_the_store_is_on_an_internal_overlay_with_the_sidecar(
    tmp_path: Path, pod_with
) -> None:  # type: ignore[no-untyped-def]
    code, err = _compile(pod_with(BUNDLED), tmp_path / "out", "--target", "swarm")
    assert code == 0, err
    stack = yaml.safe_load((tmp_path / "out" / "stack.yml").read_text())
    assert stack["networks"]["claw-limits"] == {"driver": "overlay", "internal": True}
    on_it = {n for n, s in stack["services"].items() if "claw-limits" in s.get("networks", [])}
    assert on_it == {"claw-limits", "claw-sidecar"}
    assert "CLAW_LIMITS_URL_FILE" in stack["services"]["claw-sidecar"]["environment"]


def test_on_swarm_the_store_reads_its_password_from_the_pods_secret(
    tmp_path: Path, pod_with
) -> None:  # type: ignore[no-untyped-def]
    """As documented (docs/swarm.md), the operator creates the secret and sets no variable: a
    value taken from the deploy's environment would be kept in the service's definition, and
    without it the store had no password to start with."""
    code, err = _compile(pod_with(BUNDLED), tmp_path / "out", "--target", "swarm")
    assert code == 0, err
    text = (tmp_path / "out" / "stack.yml").read_text()
    stack = yaml.safe_load(text)
    store = stack["services"]["claw-limits"]
    assert store["environment"] == {
        "CLAW_LIMITS_PASSWORD_FILE": "/run/secrets/CLAW_LIMITS_PASSWORD"
    }
    assert store["secrets"] == [
        {"source": "CLAW_LIMITS_PASSWORD", "target": "CLAW_LIMITS_PASSWORD"}
    ]
    assert stack["secrets"]["CLAW_LIMITS_PASSWORD"]["external"] is True
    assert "${CLAW_LIMITS_PASSWORD}" not in text  # nothing for the deploy to interpolate
    assert "$$CLAW_LIMITS_PASSWORD_FILE" in store["entrypoint"][2]
