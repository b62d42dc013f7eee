#!/usr/bin/env bash
# Run every test: the unit tests in tests/ and every chapter notebook (nbval-lax), in the
# `smoke` profile, in ONE pytest run. Creates .venv (scripts/setup_env.sh) on first use.
#
#   bash scripts/test.sh                 # what CI runs (.ci/run)
#   bash scripts/test.sh -k advantages   # extra arguments go to pytest
#
# nbval-lax executes each chapters/*.ipynb top to bottom and compares only the outputs of
# cells marked `# NBVAL_CHECK_OUTPUT`; any cell that raises fails the test.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup_env.sh book,test
# shellcheck disable=SC1091
. .venv/bin/activate

export GRPO_PROFILE=${GRPO_PROFILE:-smoke}
export PYTHONHASHSEED=0
echo "[test] GRPO_PROFILE=$GRPO_PROFILE; pytest tests/ and chapters/*.ipynb"
start=$(date +%s)
set +e
python -m pytest tests chapters --nbval-lax --nbval-current-env -p no:cacheprovider \
  --durations=10 "$@"
status=$?
set -e
echo "[test] finished in $(( $(date +%s) - start )) s with exit code $status"
exit $status
