#!/usr/bin/env bash
# Chapter 17, "A bigger model": the spelled Countdown recipe on the 20.4M-parameter
# small model instead of the 1.05M tiny one, in one 10-minute call on one CUDA device:
#
#   OUT=OUT_DIR bash scripts/countdown_small_gpu.sh
#
# 1. pretrain the spelled Countdown base from data/models/small-qwen2-base, as the
#    tiny spelled base was made (1000 steps x 64 documents, lr 1e-3, bfloat16 weights);
# 2. GRPO from it with the tiny spelled runs' settings (configs/countdown_chain_tiny.yaml,
#    KL 0.04 toward the base, lr LR (2e-4), dynamic sampling, the fast engine with the
#    inverse-CDF draw, which replays as one CUDA graph per decode step), seeds 0 and 1
#    side by side, each stopped by Ctrl-C (which saves the last finished step) when the
#    call's DEADLINE (default 470 s after the start) comes, so the evaluations still fit;
# 3. chapter 17's held-out protocol (500 problems x 4 samples at temperature 1 and a
#    greedy pass, 256 tokens, float32) on the base and on each run's last checkpoint.
# It first installs the wheels the GPU image lacks (datasets, dill, multiprocess,
# math-verify, latex2sympy2_extended, antlr4-python3-runtime) from .whl/ if there.
# Back in OUT: results.tgz (logs, CSVs, answers, metrics) and the base as base.tar.part*
# (join them with `cat base.tar.part* | tar xf -`). BASE=DIR takes a base made
# before (for instance one brought back so, and carried) instead of pretraining one;
# it is then neither packed nor removed, and the call has time for more GRPO steps
# (a relative DIR is read from the repository root).
# Settings for a quick check: PRE_STEPS, RL_STEPS, EVAL_N, DEADLINE, SIZE, DEVICE.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
. scripts/countdown_gpu_common.sh
install_wheels .whl
export PYTHONUNBUFFERED=1
O=${OUT:?set OUT to an output folder}/r
mkdir -p "$O"
SIZE=${SIZE:-small}
LR=${LR:-2e-4}
PRE_STEPS=${PRE_STEPS:-1000}
RL_STEPS=${RL_STEPS:-100}
DEADLINE=${DEADLINE:-470}
DEVICE=${DEVICE:-cuda}
made=$O/$SIZE-qwen2-countdown-spelled-base
BASE=${BASE:-$made}
device_info "$O/device.txt"

if [ "$BASE" = "$made" ]; then
  python3 -m grpo_lib pretrain --task countdown --size "$SIZE" \
    --init-from "data/models/$SIZE-qwen2-base" --countdown-mix spelled \
    --steps "$PRE_STEPS" --batch-size 64 --lr 0.001 --seed 0 --save-dtype bfloat16 \
    --device "$DEVICE" --eval-n 0 --out "$BASE" > "$O/pretrain.log" 2>&1
  tail -2 "$O/pretrain.log"
  echo "base made after $(( $(date +%s) - T0 )) s"
fi
[ -f "$BASE/model.safetensors" ] || { echo "no base model in $BASE" >&2; exit 1; }
held_out "$BASE" "$O/base_sampled.csv" > "$O/eval_base.log" 2>&1 &
limit=$(( DEADLINE - ($(date +%s) - T0) ))
for seed in 0 1; do
  timeout -s INT -k 30 "$limit" python3 -m grpo_lib train \
    --config configs/countdown_chain_tiny.yaml \
    --set model_name_or_path="$BASE" --set seed=$seed --set beta=0.04 \
    --set learning_rate="$LR" --set dynamic_sampling=true --set rollout_engine=fast \
    --set rollout_sampler=inverse_cdf --set max_steps="$RL_STEPS" \
    --set eval_every=0 --set eval_on_start=false --set save_every=25 \
    --set save_final=true --set progress_bar=false --set print_every=10 \
    --set output_dir="$O/seed$seed" > "$O/train_seed$seed.log" 2>&1 &
done
wait
echo "training done after $(( $(date +%s) - T0 )) s"
for seed in 0 1; do
  last=$(ls -d "$O/seed$seed"/checkpoint-* 2>/dev/null | sort -V | tail -1)
  [ -n "$last" ] || continue
  step=${last##*-}
  held_out "$last" "$O/seed$seed/sampled_eval_step$step.csv" \
    > "$O/seed$seed/eval_step$step.log" 2>&1 &
done
wait
echo "evaluations done after $(( $(date +%s) - T0 )) s"
for seed in 0 1; do
  tail -3 "$O/train_seed$seed.log"
  cat "$O/seed$seed"/sampled_eval_step*.csv 2>/dev/null
  rm -rf "$O/seed$seed"/checkpoint-*
done
cat "$O/base_sampled.csv" 2>/dev/null
cp "$BASE"/pretrain_info.json "$BASE"/pretrain_log.csv "$O"/ 2>/dev/null
if [ "$BASE" = "$made" ]; then
  tar cf - -C "$O" "$(basename "$made")" | split -b 15m - "$OUT/base.tar.part"
  rm -rf "$made"
fi
tar czf "$OUT/results.tgz" -C "$OUT" r && rm -rf "$O"
ls -la "$OUT"
