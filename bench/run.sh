#!/usr/bin/env bash
# The clawpod benchmark, in one command (see bench/README.md):
#   bench/run.sh            full run (about 10 minutes on 2 cores): JSON in bench/results/
#   bench/run.sh --quick    tiny load, no LiteLLM: a smoke run of every scenario
# Other options are passed to bench/run.py (--duration N, --no-litellm, --output FILE).
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned: newer LiteLLM releases need a certifi newer than the package index here offers, and
# this one's proxy imports a FastAPI helper that FastAPI removed after 0.136.
LITELLM_VERSION="1.96.2"
FASTAPI_VERSION="0.136.3"
PYTHON="${CLAWPOD_PYTHON:-.venv/bin/python}"
quick=0; litellm=1
for arg in "$@"; do
  case "$arg" in --quick) quick=1 ;; --no-litellm) litellm=0 ;; esac
done

if [ ! -x "$PYTHON" ]; then
  echo "bench: $PYTHON not found; run scripts/setup.sh first (or set CLAWPOD_PYTHON)" >&2
  exit 2
fi

if ! command -v wrk >/dev/null 2>&1; then
  echo "bench: installing wrk (Debian package)" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get install -y wrk >/dev/null 2>&1 || { $SUDO apt-get update >/dev/null && $SUDO apt-get install -y wrk >/dev/null; }
fi

if [ "$quick" = 0 ] && [ "$litellm" = 1 ]; then
  venv=bench/.venv-litellm
  check="import importlib.metadata as m, sys; sys.exit(m.version('litellm') != '$LITELLM_VERSION' or m.version('fastapi') != '$FASTAPI_VERSION')"
  if ! "$venv/bin/python" -c "$check" 2>/dev/null; then
    echo "bench: installing litellm[proxy]==$LITELLM_VERSION into $venv (takes a few minutes)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "litellm[proxy]==$LITELLM_VERSION" "fastapi==$FASTAPI_VERSION"
  fi
fi

exec "$PYTHON" -m bench.run "$@"
