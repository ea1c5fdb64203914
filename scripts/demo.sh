#!/usr/bin/env bash
# Set up the virtualenv if needed, compile the example pod and show what each agent sees.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/clawc compile compose/examples/trading-desk/pod.yml
.venv/bin/clawc inspect compose/examples/trading-desk/build
