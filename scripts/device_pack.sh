#!/usr/bin/env bash
# Pack this checkout for a lent GPU machine (the `device` tool of the book's workplace),
# which takes a working tree of at most 64 MiB: the tracked files are about 160 MiB,
# most of it data/. What travels instead, both ignored by git:
#   .gpu/tree.tar.xz   the tracked files, xz-compressed, less EXCLUDE; and
#                      .gpu/device_check.sh, the check to run there;
#   .whl/              the wheels the GPU image lacks (Python 3.12, manylinux).
#
#   bash scripts/device_pack.sh
#
# Then, on a clean tree, hide the tracked files while the call runs (they are in .gpu):
#   git ls-files -z | grep -zv '^.gitignore$' | xargs -0 rm -f
#   run: command "bash .gpu/device_check.sh", carry [".gpu", ".whl"], timeout_s 560
#   git checkout -- .          # every tracked file back
# .gitignore stays, or .venv would travel. EXCLUDE (an extended regex over paths) leaves
# out what the check does not need: by default the 41 MB small base, chapter 17's runs
# and the Countdown bases, so chapters 16 and 17 are not run there. To run them, pack
# less of the rest and name them (as on 2026-11-30), for instance chapter 16 alone:
#   EXCLUDE='^data/runs/|^data/models/(mini-|tiny-qwen2-(cold|count|r1|reas|rew|stage))|^data/(skills|rejection|cold_start|countdown|distill)|^chapters/(0|1[0-57-9]|2)' \
#     bash scripts/device_pack.sh     # then: CHAPTERS=chapters/16_qwen2_from_scratch.ipynb
#                                     #       BENCH=0 bash .gpu/device_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
EXCLUDE=${EXCLUDE:-'^data/models/small-qwen2-base/|^data/runs/ch17_|^data/models/tiny-qwen2-countdown'}
LIMIT=$((64 * 1024 * 1024))
if [ -n "$(git status --porcelain)" ]; then
  echo "device_pack: commit or stash first; the call hides the tracked files and" \
       "'git checkout -- .' brings back only what is committed." >&2
  exit 2
fi
for p in /.gpu/ /.whl/; do
  grep -qxF "$p" .git/info/exclude 2>/dev/null || echo "$p" >> .git/info/exclude
done
mkdir -p .gpu .whl
if ! ls .whl/*.whl > /dev/null 2>&1; then
  pkgs=(nbclient nbformat jupyter_client jupyter_core traitlets fastjsonschema jsonschema
        jsonschema-specifications referencing rpds-py platformdirs pyzmq tornado
        ipykernel comm debugpy ipython ipython-pygments-lexers matplotlib-inline
        nest_asyncio decorator jedi parso prompt_toolkit wcwidth stack_data executing
        asttokens pure_eval pexpect ptyprocess ipywidgets widgetsnbextension
        jupyterlab_widgets jupytext mdit-py-plugins nbval datasets==5.2.0 dill
        multiprocess trl==1.16.0 math-verify==0.9.0 latex2sympy2_extended==1.11.0
        antlr4-python3-runtime==4.13.2)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 -d .whl "${pkgs[@]}"
fi
cp scripts/device_check.sh .gpu/device_check.sh
git ls-files | grep -v -E "$EXCLUDE" | tar -cf - -T - | xz -9 -T1 > .gpu/tree.tar.xz
size=$(du -cb .gpu .whl | tail -1 | cut -f1)
echo "device_pack: .gpu + .whl = $((size / 1024 / 1024)) MiB of 64"
if [ "$size" -ge "$LIMIT" ]; then
  echo "device_pack: over the 64 MiB the call takes; widen EXCLUDE" >&2
  exit 1
fi
