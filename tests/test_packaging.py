"""The wheel installs one top-level package, ``clawpod``, holding every package of the tree; it
is pure Python (SPEC §20: no install path needs a compiler)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tree_packages() -> set[str]:
    """Every folder of the tree that holds files: Python packages and data-only folders."""
    return {
        "clawpod." + ".".join(path.parent.relative_to(REPO).parts)
        for folder in ("cli", "compiler", "sidecar")
        for path in (REPO / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_pyproject_lists_every_package_of_the_tree() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert set(config["tool"]["setuptools"]["packages"]) == tree_packages()


def test_the_wheel_holds_only_clawpod(tmp_path: Path) -> None:
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    # setuptools warned that the templates folder was missing from `packages`.
    assert "is absent from the `packages` configuration" not in built.stderr
    (wheel,) = tmp_path.glob("clawpod-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"clawpod"}
    assert "clawpod/sidecar/__main__.py" in names
    assert "clawpod/compiler/output/templates/CONTEXT.md.j2" in names
    # One wheel for every platform and Python: nothing in it was compiled, nor is to be.
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    assert not [n for n in names if n.endswith((".so", ".pyd", ".c"))]
    # The operator console's pages, style and script ship in the wheel (no build step).
    assets = (REPO / "sidecar/server/operator/console_assets").iterdir()
    for asset in assets:
        assert f"clawpod/sidecar/server/operator/console_assets/{asset.name}" in names
