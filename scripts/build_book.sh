#!/usr/bin/env bash
# Build the book to HTML with Jupyter Book 1.x, from the outputs stored in chapters/*.ipynb.
#
#   bash scripts/build_book.sh                  # render stored outputs (no execution)
#   GRPO_EXECUTE=1 bash scripts/build_book.sh   # re-execute every notebook while building
#                                               # (profile from GRPO_PROFILE, default cpu)
#
# Creates .venv (scripts/setup_env.sh) on first use, regenerates _toc.yml and the map in
# book/intro.md from the chapters that exist, builds into _build/html and prints the path
# of index.html. Sphinx warnings are errors: a broken cross-reference fails the build.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bash scripts/setup_env.sh book,test
# shellcheck disable=SC1091
. .venv/bin/activate

python scripts/make_toc.py

config=_config.yml
if [ "${GRPO_EXECUTE:-0}" = "1" ]; then
  export GRPO_PROFILE=${GRPO_PROFILE:-cpu}
  mkdir -p _build
  config=_build/_config_execute.yml
  # the same configuration with execution forced; paths in it stay relative to the root
  sed 's/^\(  execute_notebooks:\) *"off"/\1 "force"/' _config.yml > "$config"
  grep -q 'execute_notebooks: "force"' "$config" || {
    echo "build_book: could not switch execute_notebooks to \"force\" in $config;" \
         "check the execute: section of _config.yml" >&2; exit 1; }
  echo "[build_book] re-executing every notebook (GRPO_PROFILE=$GRPO_PROFILE)"
fi

mkdir -p _build
start=$(date +%s)
# -W: a warning (a broken {ref}, a missing citation, an unknown directive) fails the
# build; --keep-going lists all of them first
set +e
jupyter-book build . --config "$config" --toc _toc.yml --path-output . --all \
  -W --keep-going 2>&1 | tee _build/build.log
status=${PIPESTATUS[0]}
set -e
warnings=$(grep -c "WARNING:" _build/build.log || true)
echo "[build_book] built in $(( $(date +%s) - start )) s with $warnings Sphinx warning(s)" \
     "(see _build/build.log)"
if [ "$status" -ne 0 ] || [ "$warnings" -ne 0 ]; then
  echo "build_book: the build failed; warnings count as errors. The first ones:" >&2
  grep -m 10 -E "WARNING:|ERROR" _build/build.log >&2 || true
  exit 1
fi

html="$root/_build/html/index.html"
if [ ! -f "$html" ]; then
  echo "build_book: no $html after the build; see _build/build.log" >&2
  exit 1
fi
echo "Book: $html"
