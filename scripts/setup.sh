#!/usr/bin/env bash
# Create .venv beside the repo and install clawpod with its development extras (idempotent).
# Needs Python >= 3.11 and nothing else: no compiler. A .venv left half-made by an earlier
# attempt (no python, or no pip: Debian's `python3 -m venv` without python3-venv) is made again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

fail() {
  echo "scripts/setup.sh: $*" >&2
  exit 1
}

venv_works() { [ -x .venv/bin/python ] && .venv/bin/python -m pip --version >/dev/null 2>&1; }

# A virtualenv with pip: Python's own venv where it has ensurepip; where a distribution split
# ensurepip off (Debian's python3-venv), a virtualenv without pip gets pip from the system's.
make_venv() {
  rm -rf .venv
  if "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
    "$PYTHON" -m venv .venv
  elif "$PYTHON" -m pip --version >/dev/null 2>&1; then
    "$PYTHON" -m venv --without-pip .venv
    "$PYTHON" -m pip --python .venv/bin/python install -q pip
  else
    rm -rf .venv
    fail "$PYTHON has neither ensurepip nor pip, so it cannot make a virtualenv; install one: apt-get install python3-venv (Debian, Ubuntu), or a python.org build"
  fi
}

command -v "$PYTHON" >/dev/null || fail "no $PYTHON on PATH; install Python >= 3.11 (or set PYTHON=/path/to/python3.11)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  fail "$("$PYTHON" -V 2>&1) is too old; clawpod needs Python >= 3.11 (set PYTHON=/path/to/python3.11)"
if ! venv_works; then
  [ -e .venv ] && echo "scripts/setup.sh: .venv is incomplete (no working pip); making it again" >&2
  make_venv
  venv_works || fail ".venv still has no working pip after making it again"
fi
# Installed anew when the project's dependencies change.
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  rm -f .venv/.installed-* && touch "$stamp"
fi
