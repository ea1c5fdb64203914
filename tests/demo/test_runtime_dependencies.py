"""The sidecar image installs only `[project] dependencies`: everything the sidecar (and
`clawc audit`, which operators run inside it) imports must be in that list, and nothing the
sidecar never imports at run time may be."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Jinja2 is not among them: the operator console (SPEC §15) renders its pages with it.
COMPILE_TIME_ONLY = ("yaml", "docker", "cryptography", "openapi_spec_validator")


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def requirement_names(requirements: list[str]) -> set[str]:
    names = set()
    for requirement in requirements:
        name = requirement.split(";")[0]
        for mark in "<>=[ ":
            name = name.split(mark)[0]
        names.add(name.lower())
    return names


def test_compile_time_packages_are_not_run_time_dependencies() -> None:
    runtime = requirement_names(project()["dependencies"])
    compile_time = {"pyyaml", "docker", "cryptography", "openapi-spec-validator"}
    assert runtime.isdisjoint(compile_time), runtime
    assert "jinja2" in runtime  # the console's templates, also clawc compile's
    extras = project()["optional-dependencies"]
    assert requirement_names(extras["compiler"]) == {"pyyaml", "docker", "openapi-spec-validator"}
    assert "clawpod" in requirement_names(extras["dev"])  # dev = compiler extra + test tools


def test_the_sidecar_and_clawc_audit_run_without_compile_time_packages(tmp_path: Path) -> None:
    """Every sidecar module imports, and `clawc audit verify` answers, in an interpreter where
    the compile-time packages cannot be imported."""
    script = (
        "import sys, pkgutil, importlib\n"
        f"for name in {COMPILE_TIME_ONLY!r}:\n"
        "    sys.modules[name] = None\n"
        "import clawpod.sidecar\n"
        "for module in pkgutil.walk_packages(clawpod.sidecar.__path__, 'clawpod.sidecar.'):\n"
        "    importlib.import_module(module.name)\n"
        "from clawpod.cli.clawc import main\n"
        "sys.exit(main(['audit', 'verify', sys.argv[1]]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    # No audit logs in an empty state dir: exit 1 with that message, and no import error.
    assert (done.returncode, done.stdout) == (1, f"no audit logs under {tmp_path / 'audit'}\n")
    assert done.stderr == ""


def test_clawc_inspect_and_approvals_run_without_compile_time_packages() -> None:
    """The image's operator commands, cli/ over a build or a sidecar, load no compiler extra."""
    golden = Path(__file__).resolve().parents[1] / "compiler" / "golden"
    script = (
        "import sys\n"
        f"for name in {COMPILE_TIME_ONLY!r}:\n"
        "    sys.modules[name] = None\n"
        "from clawpod.cli.clawc import main\n"
        "inspected = main(['inspect', sys.argv[1]])\n"
        "listed = main(['approvals', 'list', '--sidecar', 'http://127.0.0.1:9'])\n"
        "sys.exit(10 * inspected + listed)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CLAW_OPERATOR_TOKEN"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(golden)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    # inspect answers (0); approvals stops at the missing operator token (1), not at an import.
    assert done.returncode == 1, done.stderr
    assert "pod trading-desk" in done.stdout
    assert done.stderr == "clawc: error: set CLAW_OPERATOR_TOKEN to the sidecars' operator token\n"
