#!/usr/bin/env bash
# Chapter 17's third and fourth Countdown bases, made and trained in one pass on a
# machine with one CUDA device (an H100 here; any device works, only slower):
#
#   bash scripts/countdown_bases_gpu.sh OUT_DIR
#
# For each corpus mix of grpo_lib.countdown_corpus.COUNTDOWN_MIXES named in MIXES
# (default "aimed lookahead"), in parallel:
# 1. pretrain a Countdown base from data/models/$SIZE-qwen2-base (tiny unless SIZE
#    says small), as the chain base was made (1000 steps x 64 documents, lr 1e-3,
#    bfloat16 weights; the model card is written afterwards with `python -m grpo_lib
#    card`);
# 2. GRPO from it, chapter 17's fourth try (configs/countdown_chain_tiny.yaml with a KL
#    anchor of 0.04, lr 2e-4, dynamic sampling, the fast engine), seeds 0 and 1;
# 3. the held-out protocol of chapter 17 for the base and both final checkpoints:
#    500 problems x 4 samples at temperature 1, 256 tokens, float32, every answer kept.
# Settings for a quick check: PRE_STEPS, RL_STEPS, EVAL_N, SAMPLER. SIZE=small makes
# the bases from data/models/small-qwen2-base (20.4M parameters) instead of the tiny
# one, the same corpus and steps; the GRPO config is the same.
#
# On the lent H100 (2026-11-27) this needed wheels the image lacks: datasets, dill,
# multiprocess, and math-verify with latex2sympy2_extended and antlr4-python3-runtime
# (the harness's answer check imports math_verify; without it every GRPO run stops at
# its first evaluation). The checkout travels only under 64 MiB: the 41 MB
# small-qwen2-base, data/runs and the stored notebooks were moved aside for the call.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: countdown_bases_gpu.sh OUT_DIR}
mkdir -p "$out"
PY=${PYTHON:-python3}
MIXES=${MIXES:-aimed lookahead}
PRE_STEPS=${PRE_STEPS:-1000}
RL_STEPS=${RL_STEPS:-100}
EVAL_N=${EVAL_N:-500}
SAMPLER=${SAMPLER:-inverse_cdf}  # on CUDA the inverse-CDF draw replays as a graph
SIZE=${SIZE:-tiny}
case $SIZE in tiny|small) ;; *) echo "SIZE must be tiny or small, got $SIZE" >&2; exit 2;; esac
export PYTHONUNBUFFERED=1

held_out() {  # held_out MODEL CSV: chapter 17's sampled protocol
  "$PY" -m grpo_lib eval --model "$1" --task countdown --n "$EVAL_N" --samples 4 \
    --temperature 1.0 --seed 0 --max-new-tokens 256 --batch-size 128 \
    --dtype float32 --csv "$2" --samples-out "${2%.csv}_answers.jsonl.gz"
}

pipeline() {  # pipeline MIX: pretrain, then two seeds of GRPO, then the evaluations
  local mix=$1 base="$out/models/$SIZE-qwen2-countdown-$1-base"
  mkdir -p "$out/runs"
  [ -f "$base/model.safetensors" ] ||  # a base already made is kept
  "$PY" -m grpo_lib pretrain --task countdown --size "$SIZE" \
    --init-from "data/models/$SIZE-qwen2-base" --countdown-mix "$mix" \
    --steps "$PRE_STEPS" --batch-size 64 --lr 0.001 --seed 0 --save-dtype bfloat16 \
    --eval-n 0 --out "$base" > "$out/pretrain_$mix.log" 2>&1 || return 1
  held_out "$base" "$out/runs/${mix}_base_sampled.csv" > "$out/eval_${mix}_base.log" 2>&1 &
  for seed in 0 1; do
    "$PY" -m grpo_lib train --config configs/countdown_chain_tiny.yaml \
      --set model_name_or_path="$base" --set seed=$seed --set beta=0.04 \
      --set learning_rate=2e-4 --set dynamic_sampling=true --set rollout_engine=fast \
      --set rollout_sampler="$SAMPLER" --set max_steps="$RL_STEPS" \
      --set eval_every="$RL_STEPS" --set eval_on_start=false --set eval_n="$EVAL_N" \
      --set save_every=0 \
      --set save_final=true --set progress_bar=false --set print_every=10 \
      --set output_dir="$out/runs/${mix}_seed$seed" \
      > "$out/train_${mix}_seed$seed.log" 2>&1 &
  done
  wait
  for seed in 0 1; do
    local final
    final=$(ls -d "$out/runs/${mix}_seed$seed"/checkpoint-* 2>/dev/null | sort -V | tail -1)
    [ -n "$final" ] && held_out "$final" "$out/runs/${mix}_seed${seed}_sampled.csv" \
      > "$out/eval_${mix}_seed$seed.log" 2>&1 &
  done
  wait
}

nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null | tee "$out/device.txt"
date -u | tee -a "$out/device.txt"
for mix in $MIXES; do
  pipeline "$mix" &
done
wait
date -u | tee -a "$out/device.txt"
