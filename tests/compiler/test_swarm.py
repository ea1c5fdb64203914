"""``clawc compile --target swarm`` (SPEC §13.2): a ``stack.yml`` in the shape ``docker stack
deploy`` accepts, translated from the compose document. The stack is deployed for real by
tests/swarm (marker ``swarm``)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from clawpod.cli.clawc import main
from tests.compiler.conftest import REPO
from tests.compiler.test_kubernetes import EXAMPLE
from tests.support.bigpod import write_big_pod


def compile_swarm(out: Path) -> tuple[dict[str, Any], str]:
    err = io.StringIO()
    code = main(
        ["compile", str(EXAMPLE), "-o", str(out), "--target", "swarm", "--sidecar-image", "s:1"],
        stdout=io.StringIO(), stderr=err,
    )  # fmt: skip
    assert code == 0, err.getvalue()
    return yaml.safe_load((out / "stack.yml").read_text()), err.getvalue()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return compile_swarm(tmp_path_factory.mktemp("swarm") / "build")[0]


def test_the_shape_docker_stack_deploy_accepts(stack: dict[str, Any]) -> None:
    assert stack["version"] == "3.8"  # Debian's engine refuses a file without one
    for name, service in stack["services"].items():
        assert not {"build", "depends_on", "restart"} & set(service), name
        assert service["image"], name
        assert service["deploy"]["endpoint_mode"] == "dnsrr"  # no virtual IP, no IPVS needed


def test_agents_are_not_restarted_unless_the_pod_file_asks(stack: dict[str, Any]) -> None:
    """As compose: the example's agents are one-shot programs; restarting one after it is done
    would ask its paid question again, or file a new order for approval. Servers stay up."""
    policies = {name: s["deploy"]["restart_policy"] for name, s in stack["services"].items()}
    assert policies["analyst"] == policies["trader"] == {"condition": "none"}
    assert policies["trading-api"] == policies["claw-sidecar"] == {"condition": "any"}


@pytest.mark.parametrize(
    ("restart", "policy"),
    [
        ("on-failure:3", {"condition": "on-failure", "max_attempts": 3}),
        ("on-failure", {"condition": "on-failure"}),
        ("no", {"condition": "none"}),
        ("unless-stopped", {"condition": "any"}),
    ],
)
def test_an_agents_compose_restart_carries_over(
    tmp_path: Path, restart: str, policy: dict[str, Any]
) -> None:
    pod = write_big_pod(tmp_path / "pod", agents=1, services=1, tools=1)
    data = yaml.safe_load(pod.read_text())
    data["services"]["agent0"]["restart"] = restart
    pod.write_text(yaml.safe_dump(data))
    out = tmp_path / "build"
    args = ["compile", str(pod), "-o", str(out), "--target", "swarm", "--sidecar-image", "s:1"]
    assert main(args, stdout=io.StringIO(), stderr=io.StringIO()) == 0
    service = yaml.safe_load((out / "stack.yml").read_text())["services"]["agent0"]
    assert service["deploy"]["restart_policy"] == policy
    assert "restart" not in service


def test_networks_are_overlays_internal_where_compose_is(stack: dict[str, Any]) -> None:
    networks = stack["networks"]
    assert all(n["driver"] == "overlay" for n in networks.values())
    for internal in ("claw-agents", "claw-tools", "claw-admin"):
        assert networks[internal].get("internal") is True
    assert "internal" not in networks["claw-egress"]
    assert stack["services"]["analyst"]["networks"] == ["claw-agents"]


def test_credentials_are_swarm_secrets_read_from_name_file(stack: dict[str, Any]) -> None:
    sidecar = stack["services"]["claw-sidecar"]
    environment = sidecar["environment"]
    assert environment["OPENAI_API_KEY_FILE"] == "/run/secrets/OPENAI_API_KEY"
    assert all(name.endswith("_FILE") for name in environment)
    assert {s["source"] for s in sidecar["secrets"]} == set(stack["secrets"])
    assert stack["secrets"]["OPENAI_API_KEY"] == {
        "external": True,
        "name": "trading-desk_OPENAI_API_KEY",
    }


def test_the_state_is_pinned_and_the_sidecar_never_overlaps(stack: dict[str, Any]) -> None:
    deploy = stack["services"]["claw-sidecar"]["deploy"]
    assert deploy["replicas"] == 1
    assert deploy["update_config"] == {"order": "stop-first"}
    assert deploy["placement"]["constraints"] == ["node.labels.clawpod-state-trading-desk == true"]
    assert "claw-state:/var/lib/claw" in stack["services"]["claw-sidecar"]["volumes"]


def test_build_files_are_configs_named_by_their_content(tmp_path: Path) -> None:
    first, _ = compile_swarm(tmp_path / "build")
    targets = {c["target"] for c in first["services"]["claw-sidecar"]["configs"]}
    assert "/claw/build/digest.json" in targets
    assert "/claw/build/context/trader/tools.json" in targets
    assert {c["target"] for c in first["services"]["trader"]["configs"]} == {
        "/claw/CONTEXT.md",
        "/claw/mcp.json",
    }
    names = {k: v["name"] for k, v in first["configs"].items()}
    # A changed build gets configs of new names (a Swarm config cannot change in place).
    shutil.copytree(REPO / "descriptors", tmp_path / "repo" / "descriptors")
    example = tmp_path / "repo" / "compose" / "examples" / "trading-desk"
    shutil.copytree(EXAMPLE.parent, example, ignore=shutil.ignore_patterns("build"))
    pod = example / "pod.yml"
    pod.write_text(pod.read_text().replace("max-rounds: 8", "max-rounds: 7"))
    code = main(
        ["compile", str(pod), "-o", str(tmp_path / "b2"), "--target", "swarm",
         "--sidecar-image", "s:1"],
        stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    assert code == 0
    second = yaml.safe_load((tmp_path / "b2" / "stack.yml").read_text())
    renamed = {k for k, v in second["configs"].items() if v["name"] != names[k]}
    assert "claw-context-analyst-tools-json" in renamed
    assert "claw-context-trader-tools-json" not in renamed  # the trader has its own policy


def test_no_agent_token_in_the_stack(tmp_path: Path) -> None:
    compile_swarm(tmp_path / "build")
    text = (tmp_path / "build" / "stack.yml").read_text()
    assert "claw_" not in text.replace("claw_state", "")  # tokens stay in agents/<id>.env


def test_warnings_name_what_swarm_cannot_enforce(tmp_path: Path) -> None:
    _, err = compile_swarm(tmp_path / "build")
    assert "Swarm has no per-service egress rule" in err
    assert "docker node update --label-add clawpod-state-trading-desk=true NODE" in err
