#!/usr/bin/env bash
# The book's checks on a lent GPU machine, in one call packed by scripts/device_pack.sh
# (run from the root of the copy there, as .gpu/device_check.sh; results under $OUT):
#
# 1. the CUDA tests: the graph decode path, the trainer on CUDA with each engine, a
#    synced reference resumed there, and a reward head on the body's device;
# 2. every chapter the pack carries (all but 16 and 17 by default) in the smoke
#    profile, which runs on CUDA in bfloat16 there (pytest --nbval-lax, parallel);
# 3. the step against TRL and the sampler against generate for the tiny model, with
#    the trainer's default draw (rows in $OUT/step.csv and $OUT/sampler.csv).
#
# CHAPTERS (a list of notebooks) runs only those; BENCH=0 skips part 3.
# Each part has a deadline in seconds from the start (DEADLINE, default 500, sets the
# last); a part that would start too late is skipped, and the logs come back as
# $OUT/logs.tgz whatever happens. Seen on one H200 (2026-11-30): 170-245 s in all.
set -uo pipefail
T0=$(date +%s)
DEADLINE=${DEADLINE:-500}
L=${OUT:?set OUT to an output folder}/logs
mkdir -p "$L"
el() { echo $(( $(date +%s) - T0 )); }
run() {  # run NAME DEADLINE COMMAND...: the command's output goes to $L/NAME.log
  local name=$1 limit=$(( $2 - $(el) ))
  shift 2
  if [ "$limit" -lt 20 ]; then echo "== $name: skipped at $(el) s"; return; fi
  echo "== $name (at $(el) s, limit $limit s)"
  timeout "$limit" "$@" > "$L/$name.log" 2>&1
  echo "== $name: exit $? at $(el) s"
  grep -v "Loading weights" "$L/$name.log" | tail -"${TAILN:-14}"
}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl > "$L/pip.log" 2>&1 || echo "pip install failed"
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false
tar -xJf .gpu/tree.tar.xz
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; date -u; nproc
  python3 -c "import torch, transformers, trl; print('torch', torch.__version__,
'transformers', transformers.__version__, 'trl', trl.__version__,
'cuda', torch.cuda.is_available())"
} > "$L/device.txt" 2>&1
cat "$L/device.txt"
run cuda_tests $((DEADLINE * 3 / 10)) python3 -m pytest -p no:cacheprovider -q -rfEs \
  tests/test_graph_decode.py "tests/test_trainer.py::test_training_steps_run_on_cuda" \
  "tests/test_trainer.py::test_a_synced_reference_resumes_on_cuda" \
  "tests/test_reward_model.py::test_the_new_head_follows_the_bodys_device_and_dtype"
chapters=()
# a model the pack left out still has its (empty) folder here: ask for its config
for nb in ${CHAPTERS:-chapters/*.ipynb}; do
  case $nb in
    *16_qwen2_from_scratch*) [ -f data/models/small-qwen2-base/config.json ] || continue ;;
    *17_countdown*) [ -f data/models/tiny-qwen2-countdown-base/config.json ] || continue ;;
  esac
  chapters+=("$nb")
done
TAILN=40 run chapters $((DEADLINE * 8 / 10)) env GRPO_PROFILE=smoke OMP_NUM_THREADS=1 \
  python3 -m pytest -p no:cacheprovider -q -rfE --nbval-lax --nbval-current-env -n 12 \
  --dist loadfile --durations=15 "${chapters[@]}"
[ "${BENCH:-1}" = 0 ] && DEADLINE=0  # the benchmarks' parts are then skipped
run step_vs_trl $((DEADLINE * 9 / 10)) python3 benchmarks/step_vs_trl.py \
  --dtype bfloat16 --csv "$OUT/step.csv"
run sampler $DEADLINE python3 benchmarks/sampler_vs_generate.py --device cuda \
  --dtype bfloat16 --prompts 8 --G 8 --max-new-tokens 128 --runs 3 \
  --sampler multinomial --model data/models/tiny-qwen2-base --csv "$OUT/sampler.csv"
(cd "$OUT" && tar -czf logs.tgz logs && rm -rf logs)
echo "== done at $(el) s"
