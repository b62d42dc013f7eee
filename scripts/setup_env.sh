#!/usr/bin/env bash
# Create (or reuse) .venv in the project root and install grpo_lib with the extras named
# in $1 ("book", "test" or "book,test"). Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-book,test}
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  $PY -m venv .venv
fi
. .venv/bin/activate
stamp=".venv/.grpo_lib-installed-$(echo "$extras" | tr ',' '-')"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip
  # torch first, pinned: a CPU build of 2.13.0 is available offline on the book's machines;
  # a looser spec would pull several GB of CUDA wheels.
  python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e ".[${extras}]"
  touch "$stamp"
fi
echo "[setup] .venv ready: $(python -c 'import torch, transformers; print("torch", torch.__version__, "| transformers", transformers.__version__)')"
