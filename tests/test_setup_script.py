"""scripts/setup.sh on a machine whose Python cannot make a virtualenv with pip (Debian without
python3-venv): a .venv an earlier attempt left half-made is not reused, and the one line it
prints says which package to install. The whole install, on fresh Debian images without a
compiler, is .ci/fresh-install.sh's (a CI phase)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Python as Debian ships it without python3-venv and python3-pip: no ensurepip, no pip.
PYTHON_WITHOUT_PIP = f"""#!/bin/sh
case "$*" in
  *ensurepip*|"-m pip"*) echo "No module named ${{2:-pip}}" >&2; exit 1 ;;
esac
exec {sys.executable} "$@"
"""


def test_a_half_made_venv_is_not_reused_and_the_missing_package_is_named(tmp_path: Path) -> None:
    checkout = tmp_path / "clawpod"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "setup.sh", checkout / "scripts" / "setup.sh")
    shutil.copy2(REPO / "pyproject.toml", checkout / "pyproject.toml")
    # What `python3 -m venv .venv` leaves behind on Debian without python3-venv.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", checkout / ".venv"], check=True)
    python = tmp_path / "python3"
    python.write_text(PYTHON_WITHOUT_PIP)
    python.chmod(0o755)
    done = subprocess.run(
        ["bash", checkout / "scripts" / "setup.sh"],
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(python)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[0] == "scripts/setup.sh: .venv is incomplete (no working pip); making it again"
    assert "apt-get install python3-venv" in lines[-1] and len(lines) == 2
    assert not (checkout / ".venv").exists()  # nothing half-made left for the next attempt
