"""The first commands a newcomer types: `clawc --version`, `clawc inspect` on the wrong folder,
and `clawc` installed without the compiler extra."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from clawpod.cli.clawc import main as clawc
from tests.support.example_apps import EXAMPLE_DIR


def run_clawc(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = clawc(list(argv), out, err)
    return status, out.getvalue(), err.getvalue()


def test_version_names_the_installed_package(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        clawc(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"clawc {metadata.version('clawpod')}\n"


@pytest.fixture
def pod_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "desk"
    shutil.copytree(EXAMPLE_DIR, folder, ignore=shutil.ignore_patterns("build"))
    shutil.copytree(EXAMPLE_DIR.parents[2] / "descriptors", tmp_path / "descriptors")
    # The example's descriptors sit three levels up; keep the relative paths valid.
    pod = (folder / "pod.yml").read_text().replace("../../../descriptors", "../descriptors")
    (folder / "pod.yml").write_text(pod)
    return folder


def test_inspect_on_a_pod_folder_says_to_compile_it_first(pod_folder: Path) -> None:
    status, out, err = run_clawc("inspect", str(pod_folder))
    assert (status, out) == (1, "")
    assert err == (
        f"clawc: error: {pod_folder} is a pod folder, not a build; run clawc compile "
        f"{pod_folder / 'pod.yml'}, then clawc inspect {pod_folder / 'build'}\n"
    )


def test_inspect_on_a_compiled_pod_file_points_at_its_build(pod_folder: Path) -> None:
    assert run_clawc("compile", str(pod_folder / "pod.yml"))[0] == 0
    status, _, err = run_clawc("inspect", str(pod_folder / "pod.yml"))
    assert status == 1
    assert err == (
        f"clawc: error: {pod_folder / 'pod.yml'} is a pod file, not a build; "
        f"its build is here: clawc inspect {pod_folder / 'build'}\n"
    )


def test_inspect_on_a_missing_path_says_so(tmp_path: Path) -> None:
    status, _, err = run_clawc("inspect", str(tmp_path / "nowhere"))
    assert status == 1
    assert err.startswith(f"clawc: error: {tmp_path / 'nowhere'} does not exist; clawc compile")
    assert "Errno" not in err


def test_compile_without_the_compiler_extra_names_the_extra(pod_folder: Path) -> None:
    # A fresh interpreter in which the compiler extra's modules cannot be imported, as after
    # installing the wheel without its extra.
    script = (
        "import sys\n"
        "for name in ('yaml', 'jinja2', 'docker'):\n"
        "    sys.modules[name] = None\n"
        "from clawpod.cli.clawc import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "compile", str(pod_folder / "pod.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    # The name is not on PyPI: `pip install 'clawpod[compiler]'` would find nothing.
    assert "needs jinja2, from the compiler extra: install clawpod again with [compiler]" in (
        done.stderr
    )
    assert "pip install 'clawpod[compiler]'" not in done.stderr
    assert done.stderr.endswith("(README.md, Installing without the repository)\n")
