"""The wheel installs one top-level package, ``clawpod``, holding every package of the tree."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def tree_packages() -> set[str]:
    return {
        "clawpod." + ".".join(init.parent.relative_to(REPO).parts)
        for folder in ("compiler", "sidecar")
        for init in (REPO / folder).rglob("__init__.py")
    }


def test_pyproject_lists_every_package_of_the_tree() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert set(config["tool"]["setuptools"]["packages"]) == tree_packages()


def test_the_wheel_holds_only_clawpod(tmp_path: Path) -> None:
    subprocess.run(
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
    )
    (wheel,) = tmp_path.glob("clawpod-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"clawpod"}
    assert "clawpod/sidecar/__main__.py" in names
    assert "clawpod/compiler/templates/CONTEXT.md.j2" in names
    # The operator console's pages, style and script ship in the wheel (no build step).
    assets = (REPO / "sidecar/server/console_assets").iterdir()
    for asset in assets:
        assert f"clawpod/sidecar/server/console_assets/{asset.name}" in names
