#!/usr/bin/env bash
# The main job on this machine, with no network and no keys: compile the example pod, start its
# tool services, a scripted demo model and the sidecar, run the example agent's question through
# the sidecar and show each step and the audit. Everything it starts is stopped when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "==> setting up .venv (the first run installs clawpod and its extras, later runs skip this)"
bash scripts/setup.sh
echo "==> setup done; starting the demo"
# The driver runs in the background so that this trap gets Ctrl-C and stops it (and with it
# every process and server it started) however the script ends.
.venv/bin/python scripts/demo.py "$@" &
driver=$!
trap 'kill -TERM "$driver" 2>/dev/null || true; wait "$driver" 2>/dev/null || true' EXIT INT TERM
status=0
wait "$driver" || status=$?
trap - EXIT INT TERM
exit "$status"
