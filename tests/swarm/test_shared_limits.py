"""The store of shared limits that clawc adds, deployed as a Swarm stack (SPEC §24, docs/swarm.md).

The compose suite's small pod (two agents in one budget group) compiled with
``--target swarm`` and deployed as docs/swarm.md says: the secrets created, nothing of the
store's password in the environment of ``docker stack deploy``. A second sidecar of the same
build, on its own volume, joins the stack; each agent talks to its own sidecar, and the two
spend one group budget through the store.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from clawpod.compiler.output.swarm import secret_name, state_label
from clawpod.compiler.pod_file.reserved import SIDECAR_SERVICE, STORE_SERVICE
from tests.docker.conftest import build_store_image
from tests.docker.pod import UPSTREAM, PodFiles
from tests.docker.test_shared_limits import (
    FIRST_AGENT,
    GROUP_TOKENS,
    PASSWORD_ENV,
    SECOND_AGENT,
    SECOND_SIDECAR,
    SECOND_STATE,
    ask,
    fleet_pod_file,
    second_sidecar,
)
from tests.swarm.stack import IMAGES, STACK_GUARD_S, Stack, _environ, compile_swarm, docker_cli

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(600)]

STORE_IMAGE = "clawpod-swarm/valkey:session"


class FleetStack(Stack):
    """The small pod as a stack, with a second sidecar; the store's password only a secret."""

    def __init__(self, directory: Path, node: str) -> None:
        project = f"clawfleet{secrets.token_hex(3)}"
        pod_file = directory / project / "pod.yml"
        pod_file.parent.mkdir(parents=True)
        pod = fleet_pod_file(project, IMAGES["agent"], STORE_IMAGE)
        pod_file.write_text(yaml.safe_dump(pod, sort_keys=False))
        out = directory / "build"
        compile_swarm(pod_file, out)
        compiled = yaml.safe_load((out / "stack.yml").read_text())
        upstream = {
            "image": IMAGES["upstream"],
            "environment": {"EXPECTED_API_KEY": "${OPENAI_API_KEY}"},
            "networks": ["claw-egress"],
            "deploy": {"endpoint_mode": "dnsrr"},
        }
        override = {
            "version": "3.8",
            "services": {UPSTREAM: upstream, SECOND_SIDECAR: second_sidecar(compiled)},
            "volumes": {SECOND_STATE: {}},
        }
        (out / "stack.e2e.yml").write_text(yaml.safe_dump(override))
        password = secrets.token_hex(16)
        credentials = {
            "OPENAI_API_KEY": f"e2e-openai-{secrets.token_hex(12)}",
            "CLAW_AUDIT_KEY": f"e2e-audit-{secrets.token_hex(12)}",
            PASSWORD_ENV: password,
            "CLAW_LIMITS_URL": f"redis://:{password}@{STORE_SERVICE}:6379/0",
        }
        self.files = PodFiles(project=project, out=out, credentials=credentials)
        self.client = docker.from_env()
        self.node = node

    def deploy(self) -> None:
        for name, value in self.files.credentials.items():
            subprocess.run(
                ["docker", "secret", "create", secret_name(self.project, name), "-"],
                input=value, capture_output=True, text=True, check=True,
            )  # fmt: skip
        docker_cli("node", "update", "--label-add", f"{state_label(self.project)}=true", self.node)
        # As docs/swarm.md says: the secrets hold the credentials; the deploy's environment
        # only what the test's own upstream takes.
        env = {**_environ(), "OPENAI_API_KEY": self.files.credentials["OPENAI_API_KEY"]}
        out = self.files.out
        files = ["-c", str(out / "stack.yml"), "-c", str(out / "stack.e2e.yml")]
        docker_cli("stack", "deploy", "--resolve-image", "never", *files, self.project, env=env)
        for service in (SIDECAR_SERVICE, SECOND_SIDECAR, UPSTREAM):
            self.wait_healthy(service, STACK_GUARD_S)
        for service in (FIRST_AGENT, SECOND_AGENT, STORE_SERVICE):
            self.wait_running(service, STACK_GUARD_S)

    def cleanup(self) -> None:
        super().cleanup()
        for volume in ("claw-limits-data", SECOND_STATE):
            docker_cli("volume", "rm", f"{self.project}_{volume}", check=False)


@pytest.fixture(scope="module")
def fleet_stack(
    swarm_node: str, swarm_images: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FleetStack]:
    build_store_image(STORE_IMAGE)
    deployed = FleetStack(tmp_path_factory.mktemp("fleet-stack"), swarm_node)
    try:
        deployed.deploy()
        yield deployed
    finally:
        deployed.remove()
        deployed.cleanup()


def test_two_sidecars_of_a_stack_spend_one_group_budget(fleet_stack: FleetStack) -> None:
    answered = ask(fleet_stack, FIRST_AGENT, SIDECAR_SERVICE)
    refused = ask(fleet_stack, SECOND_AGENT, SECOND_SIDECAR)

    assert answered["status"] == 200 and answered["usage"]["total_tokens"] > GROUP_TOKENS
    assert (refused["status"], refused["code"]) == (429, "budget_exhausted"), refused


def test_the_stores_password_is_only_a_secret(fleet_stack: FleetStack) -> None:
    password = fleet_stack.files.credentials[PASSWORD_ENV]
    service = docker_cli("service", "inspect", f"{fleet_stack.project}_{STORE_SERVICE}")
    task = json.dumps(fleet_stack.container(STORE_SERVICE).attrs)
    target = f"{STORE_SERVICE}:6379"

    # Who joins its network is the compiler's (tests/compiler/test_shared_limits.py); the
    # compose suite probes it from the agents' containers.
    ping = fleet_stack.probe(SIDECAR_SERVICE, "store_ping", target)

    assert password not in service and password not in task
    spec: list[dict[str, Any]] = json.loads(service)
    secret_files = spec[0]["Spec"]["TaskTemplate"]["ContainerSpec"]["Secrets"]
    assert [s["File"]["Name"] for s in secret_files] == [PASSWORD_ENV]
    assert ping["reply"].startswith("-NOAUTH")  # it runs, and wants its password
