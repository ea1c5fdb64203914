"""The store of shared limits that clawc adds to a pod (SPEC §24), started for real.

A small pod (two agents in one budget group, the scripted upstream) compiled with
``x-claw.shared-limits: {service: ...}`` runs with ``docker compose up``, plus a second sidecar
of the same build on its own state volume (as a second deployment of the pod file would be).
Each agent talks to its own sidecar; the two spend one group budget through the store. The
pod file names the store's image: no registry serves clawc's default (valkey/valkey) here, so
the suite builds one from Debian's valkey-server (tests/docker/store).
"""

from __future__ import annotations

import copy
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from clawpod.compiler.output.workloads import substitute
from clawpod.compiler.pod_file.reserved import (
    ADMIN_NETWORK,
    SIDECAR_SERVICE,
    STATE_VOLUME,
    STORE_NETWORK,
    STORE_SERVICE,
)
from tests.docker.conftest import build_store_image
from tests.docker.pod import IMAGES, MODEL, STATE_DIR, UPSTREAM, UPSTREAM_PORT, Pod, PodFiles

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

STORE_IMAGE = "clawpod-e2e/valkey:session"
PASSWORD_ENV = "CLAW_LIMITS_PASSWORD"
SECOND_SIDECAR = "claw-sidecar-b"
SECOND_STATE = "claw-state-b"
FIRST_AGENT, SECOND_AGENT = "alpha", "beta"
GROUP_TOKENS = 10  # one scripted answer spends 18: the first request spends the whole budget
STORE_GUARD_S = 60  # how long the sidecar may take to reach a restarted store: a deadlock guard


def fleet_pod_file(project: str, agent_image: str, store_image: str) -> dict[str, Any]:
    """Two agents in one budget group a single answer spends, and the store clawc adds."""
    upstream = f"http://{UPSTREAM}:{UPSTREAM_PORT}/v1"
    agent = {"image": agent_image, "x-claw": {"agent": {}}}
    return {
        "x-claw": {
            "pod": project,
            "mode": "mediated",
            "providers": {
                "openai": {
                    "api": "openai",
                    "base-url": upstream,
                    "key-env": "OPENAI_API_KEY",
                    "models": ["gpt-*"],
                }
            },
            "shared-limits": {"service": {"password-env": PASSWORD_ENV, "image": store_image}},
            "budget-groups": {
                "team": {"agents": [FIRST_AGENT, SECOND_AGENT], "tokens-per-day": GROUP_TOKENS}
            },
        },
        "services": {FIRST_AGENT: agent, SECOND_AGENT: copy.deepcopy(agent)},
    }


def second_sidecar(compiled: dict[str, Any]) -> dict[str, Any]:
    """The compiled sidecar's service on a state volume of its own, its operator listener on
    its loopback (the operator network's alias names the first)."""
    second = copy.deepcopy(compiled["services"][SIDECAR_SERVICE])
    second["volumes"] = [
        f"{SECOND_STATE}:{STATE_DIR}" if volume.startswith(f"{STATE_VOLUME}:") else volume
        for volume in second["volumes"]
    ]
    del second["networks"][ADMIN_NETWORK]
    second["command"] = [*second["command"], "--admin-host", "127.0.0.1"]
    return second


def _override(compiled: dict[str, Any]) -> dict[str, Any]:
    """The scripted upstream on the egress network only, prebuilt images, and the second
    sidecar."""
    second = second_sidecar(compiled)
    never = {"pull_policy": "never"}
    return {
        "services": {
            UPSTREAM: {
                "image": IMAGES["upstream"],
                **never,
                "environment": {"EXPECTED_API_KEY": "${OPENAI_API_KEY}"},
                "networks": ["claw-egress"],
            },
            SECOND_SIDECAR: {**second, **never},
            SIDECAR_SERVICE: never,
            STORE_SERVICE: never,
            FIRST_AGENT: never,
            SECOND_AGENT: never,
        },
        "volumes": {SECOND_STATE: {}},
    }


def _write(directory: Path) -> PodFiles:
    project = f"clawpod-fleet-{secrets.token_hex(3)}"
    pod_file = directory / project / "pod.yml"
    pod_file.parent.mkdir(parents=True)
    pod = fleet_pod_file(project, IMAGES["agent"], STORE_IMAGE)
    pod_file.write_text(yaml.safe_dump(pod, sort_keys=False))
    out = directory / "build"
    clawc = Path(sys.executable).parent / "clawc"
    command = [str(clawc), "compile", str(pod_file), "-o", str(out)]
    result = subprocess.run(
        [*command, "--sidecar-image", IMAGES["sidecar"]], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise AssertionError(f"clawc compile failed:\n{result.stdout}{result.stderr}")
    credentials = {
        name: f"e2e-{name.lower()}-{secrets.token_hex(12)}"
        for name in ("OPENAI_API_KEY", "CLAW_AUDIT_KEY", PASSWORD_ENV)
    }
    (out / ".env").write_text("".join(f"{k}={v}\n" for k, v in credentials.items()))
    compiled = yaml.safe_load((out / "compose.yml").read_text())
    (out / "compose.e2e.yml").write_text(yaml.safe_dump(_override(compiled)))
    return PodFiles(project=project, out=out, credentials=credentials)


@pytest.fixture(scope="module")
def fleet(images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    build_store_image(STORE_IMAGE)
    running = Pod(_write(tmp_path_factory.mktemp("fleet")))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def ask(fleet: Pod, agent: str, sidecar: str) -> dict[str, Any]:
    """One chat completion from ``agent``'s container through ``sidecar``."""
    base_url = {"OPENAI_BASE_URL": f"http://{sidecar}:8080/v1"}
    return fleet.probe(agent, "chat_status", MODEL, "How much is left?", env=base_url)


def _audited(fleet: Pod, sidecar: str, agent: str) -> list[dict[str, Any]]:
    code, output = fleet.exec(sidecar, "sh", "-c", f"cat {STATE_DIR}/audit/{agent}.jsonl")
    return [json.loads(line) for line in output.splitlines() if line.strip()] if code == 0 else []


def test_two_sidecars_spend_one_group_budget_through_the_store(fleet: Pod) -> None:
    answered = ask(fleet, FIRST_AGENT, SIDECAR_SERVICE)
    refused = ask(fleet, SECOND_AGENT, SECOND_SIDECAR)

    assert answered["status"] == 200 and answered["usage"]["total_tokens"] > GROUP_TOKENS
    assert (refused["status"], refused["code"], refused["should_retry"]) == (
        429,
        "budget_exhausted",
        "false",
    )
    # Two sidecars with two volumes: the second never saw the first agent's request, so only
    # the store can have told it the budget was spent.
    assert _audited(fleet, SECOND_SIDECAR, FIRST_AGENT) == []
    first, second = fleet.container(SIDECAR_SERVICE), fleet.container(SECOND_SIDECAR)
    assert {m["Name"] for m in first.attrs["Mounts"] if m["Type"] == "volume"} != {
        m["Name"] for m in second.attrs["Mounts"] if m["Type"] == "volume"
    }


def test_the_store_is_reachable_on_the_sidecars_network_only(fleet: Pod) -> None:
    target = f"{STORE_SERVICE}:6379"

    from_agent = fleet.reach(FIRST_AGENT, [target])[target]
    from_upstream = fleet.reach(UPSTREAM, [target])[target]
    from_sidecars = [fleet.reach(s, [target])[target] for s in (SIDECAR_SERVICE, SECOND_SIDECAR)]

    assert from_agent["resolved"] is None and not from_agent["connected"], from_agent
    assert from_upstream["resolved"] is None and not from_upstream["connected"], from_upstream
    assert all(reached["connected"] for reached in from_sidecars), from_sidecars
    store = fleet.container(STORE_SERVICE).attrs
    network = f"{fleet.files.project}_{STORE_NETWORK}"
    assert list(store["NetworkSettings"]["Networks"]) == [network]
    assert fleet.client.networks.get(network).attrs["Internal"] is True
    assert not any(store["NetworkSettings"]["Ports"].values())  # nothing published on the host
    # On its network, a client without the password is refused.
    assert fleet.probe(SIDECAR_SERVICE, "store_ping", target)["reply"].startswith("-NOAUTH")


def test_the_store_password_is_in_no_artifact_command_line_or_log(fleet: Pod) -> None:
    password = fleet.files.credentials[PASSWORD_ENV]
    artifacts = [p for p in fleet.files.out.rglob("*") if p.is_file() and p.name != ".env"]
    code, command_line = fleet.exec(STORE_SERVICE, "cat", "/proc/1/cmdline")
    code_ps, processes = fleet.exec(
        STORE_SERVICE, "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
    )
    logs = [
        fleet.container(service).logs().decode(errors="replace")
        for service in (STORE_SERVICE, SIDECAR_SERVICE, SECOND_SIDECAR)
    ]
    audit = [
        fleet.exec(s, "sh", "-c", f"cat {STATE_DIR}/audit/*.jsonl")[1]
        for s in (SIDECAR_SERVICE, SECOND_SIDECAR)
    ]

    assert artifacts and code == 0 and code_ps == 0
    assert "valkey-server" in command_line  # the server itself, its password not on its line
    for artifact in artifacts:
        assert password.encode() not in artifact.read_bytes(), artifact
    for text in [command_line, processes, *logs, *audit]:
        assert password not in text


def test_the_counts_survive_a_restart_of_the_store(fleet: Pod) -> None:
    ask(fleet, FIRST_AGENT, SIDECAR_SERVICE)  # spent, whichever test ran first
    fleet.container(STORE_SERVICE).restart(timeout=10)

    deadline = time.monotonic() + STORE_GUARD_S
    answer = ask(fleet, SECOND_AGENT, SECOND_SIDECAR)
    while answer["code"] == "shared_limits_unavailable" and time.monotonic() < deadline:
        time.sleep(0.5)  # fail-closed until the sidecar reconnects, by itself
        answer = ask(fleet, SECOND_AGENT, SECOND_SIDECAR)

    # The append-only file on the store's volume (written as 999:1000) kept the day's count.
    assert (answer["status"], answer["code"]) == (429, "budget_exhausted"), answer
    code, listing = fleet.exec(STORE_SERVICE, "ls", "/data/appendonlydir")
    assert code == 0 and ".aof" in listing
    # The sidecars rode it out: neither restarted.
    for sidecar in (SIDECAR_SERVICE, SECOND_SIDECAR):
        assert fleet.container(sidecar).attrs["RestartCount"] == 0, sidecar


def _run_store(fleet: Pod, environment: dict[str, str], secret: Path | None) -> Any:
    """The compiled store's entrypoint in a container of its own, off every network."""
    compiled = yaml.safe_load((fleet.files.out / "compose.yml").read_text())
    store = compiled["services"][STORE_SERVICE]
    script = substitute(store["entrypoint"][2], lambda name: pytest.fail(f"interpolates {name}"))
    mounts = {str(secret): {"bind": f"/run/secrets/{PASSWORD_ENV}", "mode": "ro"}} if secret else {}
    return fleet.client.containers.run(
        store["image"],
        entrypoint=[*store["entrypoint"][:2], script],
        user=store["user"],
        environment=environment,
        volumes=mounts,
        network_mode="none",
        detach=True,
    )


def test_the_store_takes_its_password_from_a_secret_file_or_does_not_start(
    fleet: Pod, tmp_path: Path
) -> None:
    """How Swarm hands it the password (``NAME_FILE``, a mounted secret); and without any, it
    refuses to start rather than serve without one."""
    password = secrets.token_hex(16)
    secret = tmp_path / PASSWORD_ENV
    secret.write_text(password)
    secret.chmod(0o644)  # the server runs as 999:1000
    from_file = _run_store(fleet, {f"{PASSWORD_ENV}_FILE": f"/run/secrets/{PASSWORD_ENV}"}, secret)
    without = _run_store(fleet, {}, None)
    try:
        ping = ["valkey-cli", "--no-auth-warning", "-a", password, "ping"]
        deadline = time.monotonic() + STORE_GUARD_S
        answer = b""
        while answer.strip() != b"PONG" and time.monotonic() < deadline:
            from_file.reload()
            assert from_file.status == "running", from_file.logs().decode(errors="replace")
            answer = from_file.exec_run(ping).output
            time.sleep(0.2)
        unauthenticated = from_file.exec_run(["valkey-cli", "ping"]).output
        exited = without.wait(timeout=STORE_GUARD_S)
        refusal = without.logs().decode(errors="replace")
        command_line = from_file.exec_run(["cat", "/proc/1/cmdline"]).output
    finally:
        from_file.remove(force=True)
        without.remove(force=True)

    assert answer.strip() == b"PONG"
    assert b"NOAUTH" in unauthenticated
    assert password.encode() not in command_line
    assert exited["StatusCode"] == 1 and f"{PASSWORD_ENV} is empty" in refusal, refusal
