"""docs/local-models.md's recipe, compiled: the model service sits on the egress network with
the sidecar, where no agent can reach it, and the sidecar is the only way to it."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from clawpod.cli.clawc import main as clawc
from tests.support.example_apps import EXAMPLE_DIR, example_pod_copy

PROVIDER = {
    "api": "openai",
    "base-url": "http://local-model:8000/v1",
    "key-env": "LOCAL_MODEL_KEY",
    "models": ["*"],
}


def test_the_local_model_is_reachable_by_the_sidecar_only(tmp_path: Path) -> None:
    pod = example_pod_copy(tmp_path)
    pod["x-claw"]["providers"] = {"local": PROVIDER}
    pod["services"]["local-model"] = {
        "build": str(EXAMPLE_DIR / "demo-model"),
        "expose": ["8000"],
        "networks": ["claw-egress"],
    }
    (tmp_path / "pod.yml").write_text(yaml.safe_dump(pod, sort_keys=False))
    quiet = io.StringIO()
    assert (
        clawc(["compile", str(tmp_path / "pod.yml"), "-o", str(tmp_path / "out")], quiet, quiet)
        == 0
    )

    compose = yaml.safe_load((tmp_path / "out" / "compose.yml").read_text())
    networks = {name: service.get("networks", []) for name, service in compose["services"].items()}
    on_egress = sorted(name for name, joined in networks.items() if "claw-egress" in joined)
    assert on_egress == ["claw-sidecar", "local-model"]
    assert networks["analyst"] == ["claw-agents"]
    sidecar = compose["services"]["claw-sidecar"]
    assert sidecar["environment"]["LOCAL_MODEL_KEY"] == "${LOCAL_MODEL_KEY}"
    config = yaml.safe_load((tmp_path / "out" / "sidecar.json").read_text())
    assert list(config["providers"]) == ["local"]  # no cloud provider left to leak to
