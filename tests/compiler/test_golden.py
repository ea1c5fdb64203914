"""Golden files: the example build, byte for byte (tokens seeded through earlier env files).

Regenerate after an intended change:
    CLAW_UPDATE_GOLDEN=1 .venv/bin/pytest tests/compiler/test_golden.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from clawpod.cli.clawc import main
from tests.compiler.conftest import REPO

GOLDEN = Path(__file__).parent / "golden"
TOKENS = {
    "analyst": "claw_" + "golden-analyst-token-".ljust(43, "a"),
    "trader": "claw_" + "golden-trader-token-".ljust(43, "t"),
}
# In the repository, compose/examples/trading-desk/build is four levels below the root.
SIDECAR_CONTEXT = "../../../.."


def compile_example_copy(root: Path) -> Path:
    """Compile a copy of the example laid out as in the repository, with known tokens."""
    shutil.copytree(REPO / "descriptors", root / "descriptors")
    example = root / "compose" / "examples" / "trading-desk"
    shutil.copytree(
        REPO / "compose" / "examples" / "trading-desk",
        example,
        ignore=shutil.ignore_patterns("build"),
    )
    out = example / "build"
    (out / "agents").mkdir(parents=True)
    (out / "digest.json").write_text("{}")
    for agent, token in TOKENS.items():
        (out / "agents" / f"{agent}.env").write_text(f"CLAW_AGENT_TOKEN={token}\n")
    assert main(["compile", str(example / "pod.yml")]) == 0
    return out


def build_files(out: Path) -> dict[str, bytes]:
    files = {
        p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
    }
    context = os.path.relpath(REPO, out)
    files["compose.yml"] = files["compose.yml"].replace(
        f"context: {context}\n".encode(), f"context: {SIDECAR_CONTEXT}\n".encode()
    )
    return files


def test_example_build_matches_golden_files(tmp_path: Path) -> None:
    files = build_files(compile_example_copy(tmp_path))
    if os.environ.get("CLAW_UPDATE_GOLDEN"):
        shutil.rmtree(GOLDEN, ignore_errors=True)
        for name, data in files.items():
            (GOLDEN / name).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / name).write_bytes(data)
    golden = {
        p.relative_to(GOLDEN).as_posix(): p.read_bytes()
        for p in sorted(GOLDEN.rglob("*"))
        if p.is_file()
    }
    assert sorted(files) == sorted(golden)
    for name in golden:
        assert files[name] == golden[name], f"{name} differs from tests/compiler/golden/{name}"


@pytest.mark.parametrize("rotate", [False, True])
def test_golden_tokens_are_reused_unless_rotated(tmp_path: Path, rotate: bool) -> None:
    out = compile_example_copy(tmp_path)
    pod = out.parent / "pod.yml"
    assert main(["compile", str(pod), *(["--rotate-tokens"] if rotate else [])]) == 0
    text = (out / "agents" / "analyst.env").read_text()
    assert (TOKENS["analyst"] in text) is not rotate
