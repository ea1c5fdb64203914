#!/usr/bin/env bash
# The README's set-up, demo, test and "installing without the repository" commands, exactly as
# README.md shows them (the blocks marked `tested-by: .ci/fresh-install.sh`), run by a newcomer
# in a fresh container of IMAGE: Debian with its Python and pip, no C compiler, no project file
# baked in. The project arrives as `git archive HEAD` would give it to a user. It fails if any
# step fails, so if any install step needs a compiler; it also checks that none is there.
#
#   .ci/fresh-install.sh IMAGE [PYTEST_ARGS...]
#
# PYTEST_ARGS narrow the README's `scripts/test.sh` (through PYTEST_ADDOPTS): the whole fast
# suite runs in .ci/run's own phase; here the tests that show the install works.
# Needs a running Docker engine (scripts/provision-docker.sh up) and the repository's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
image=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git archive --format=tar HEAD >"$work/clawpod.tar"
# The blocks, in the README's order, each followed by a line that says it finished.
.venv/bin/python - "$work/blocks.sh" <<'EOF'
import sys
from pathlib import Path

from tests.support.doc_commands import command_blocks

blocks = [
    b for b in command_blocks(Path("README.md")) if b.requires == "tested-by: .ci/fresh-install.sh"
]
assert len(blocks) == 3, [b.where for b in blocks]  # demo, tests, without the repository
lines = []
for number, block in enumerate(blocks):
    lines += [f"echo '==> README.md block {number + 1} ({block.where}):'", block.script]
    if number == 1:  # before the third: what its `python3 -m venv` needs on Debian
        lines.append("apt-get -qq update && apt-get -qq install -y python3-venv >/dev/null")
        lines.append("no_compiler")
    lines.append(f"echo '==> README.md block {number + 1} done'")
Path(sys.argv[1]).write_text("\n".join(lines) + "\n")
EOF

cat >"$work/run.sh" <<'EOF'
set -euo pipefail
no_compiler() {
  local found
  found=$(compgen -c | grep -xE '(gcc|cc|c\+\+|g\+\+|clang)(-[0-9.]+)?|x86_64-linux-gnu-gcc(-[0-9.]+)?' || true)
  if [ -n "$found" ]; then echo "a C compiler is in the image: $found" >&2; exit 1; fi
}
no_compiler
mkdir -p ~/clawpod && tar -xf /fresh/clawpod.tar -C ~/clawpod && cd ~/clawpod
echo "==> $(. /etc/os-release && echo "$PRETTY_NAME"), $(python3 -V), no C compiler"
# What a first attempt on Debian without python3-venv leaves: a .venv with python and no pip.
if ! python3 -c 'import ensurepip' 2>/dev/null; then
  if python3 -m venv .venv >/dev/null 2>&1 || [ ! -x .venv/bin/python ]; then
    echo "expected Debian's venv to fail and leave a .venv without pip" >&2
    exit 1
  fi
  echo "==> a half-made .venv (python, no pip), as Debian's venv leaves it without python3-venv"
fi
. /fresh/blocks.sh
EOF

# Every package comes from PyPI each time, as for a newcomer (the answers it gets here are not
# cacheable, so pip's cache would hold nothing).
docker run --rm --network bridge -e PYTEST_ADDOPTS="$*" -v "$work:/fresh:ro" "$image" \
  bash /fresh/run.sh
