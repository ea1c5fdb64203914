#!/usr/bin/env bash
# Set up the virtualenv if needed, then run the test suite. Extra arguments go to pytest,
# e.g. `scripts/test.sh -m docker` for the Docker end-to-end tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
