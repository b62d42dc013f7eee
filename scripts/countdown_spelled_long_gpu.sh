#!/usr/bin/env bash
# Chapter 17, "One schedule of 200 steps": GRPO from the spelled Countdown base
# with a 200-step schedule at two learning rates (2e-4 and 4e-4), two seeds each,
# four runs at a time on one GPU, then chapter 17's held-out protocol on every
# saved checkpoint (steps 100 and 200) and on the base:
#
#   OUT=OUT_DIR bash scripts/countdown_spelled_long_gpu.sh
#
# BASE is the spelled base (default runs/spelled_base), made on the CPU with
#   python -m grpo_lib pretrain --task countdown --size tiny \
#     --init-from data/models/tiny-qwen2-base --countdown-mix spelled --steps 1000 \
#     --batch-size 64 --lr 0.001 --seed 0 --save-dtype bfloat16 --device cpu \
#     --eval-n 0 --save-every 250 --out runs/spelled_base
# TRAIN_LIMIT (default 450 s) stops each run so that the whole pass fits a 10-minute
# device call; on the lent H200 (2026-11-28) it stopped them at steps 165-180, so only
# step 100 was saved and evaluated. It first installs wheels the GPU image lacks
# (datasets, dill, multiprocess, math-verify, latex2sympy2_extended,
# antlr4-python3-runtime) from .gpuwhl/ if that folder is there.
# Checkpoints come back as one tar per run (model and configs only); the logs, CSVs and
# answers as results.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/countdown_gpu_common.sh
install_wheels .gpuwhl
export PYTHONUNBUFFERED=1
O=${OUT:?set OUT to an output folder}/r
mkdir -p "$O"
BASE=${BASE:-runs/spelled_base}
STEPS=${STEPS:-200}
device_info "$O/device.txt"

T0=$(date +%s)
for lr in 2e-4 4e-4; do
  for seed in 0 1; do
    name=lr${lr}_seed$seed
    timeout "${TRAIN_LIMIT:-450}" python3 -m grpo_lib train \
      --config configs/countdown_chain_tiny.yaml \
      --set model_name_or_path="$BASE" --set seed=$seed --set beta=0.04 \
      --set learning_rate=$lr --set dynamic_sampling=true --set rollout_engine=fast \
      --set rollout_sampler=inverse_cdf --set max_steps="$STEPS" \
      --set eval_every=0 --set eval_on_start=false --set save_every=100 \
      --set save_final=true --set progress_bar=false --set print_every=20 \
      --set output_dir="$O/$name" > "$O/train_$name.log" 2>&1 &
  done
done
held_out "$BASE" "$O/base_sampled.csv" > "$O/eval_base.log" 2>&1 &
wait
echo "training done after $(( $(date +%s) - T0 )) s"
for d in "$O"/lr*; do
  for c in "$d"/checkpoint-*; do
    [ -f "$c/model.safetensors" ] || continue
    step=${c##*-}
    held_out "$c" "$d/sampled_eval_step$step.csv" > "$d/eval_step$step.log" 2>&1 &
  done
done
wait
echo "evaluations done after $(( $(date +%s) - T0 )) s"
for d in "$O"/lr*; do
  n=$(basename "$d")
  tail -1 "$O/train_$n.log"
  cat "$d"/sampled_eval_step*.csv
  for c in "$d"/checkpoint-*; do
    [ -d "$c" ] || continue
    mkdir -p "$OUT/ck/$n/$(basename "$c")"
    cp "$c"/*.json "$c/model.safetensors" "$OUT/ck/$n/$(basename "$c")/" 2>/dev/null
    rm -rf "$c"
  done
  [ -d "$OUT/ck/$n" ] && tar cf "$OUT/ck_$n.tar" -C "$OUT/ck" "$n"
done
tar czf "$OUT/results.tgz" -C "$OUT" r && rm -rf "$O" "$OUT/ck"
ls -la "$OUT"
