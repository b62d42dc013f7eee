#!/usr/bin/env bash
# Chapter 17, "Learning from its own right answers": two rounds of rejection-sampling
# fine-tuning (RAFT) from the spelled base, two seeds, then chapter 17's held-out
# protocol after each round, within 256 new tokens, on a 2-core CPU:
#
#   bash scripts/countdown_rft_cpu.sh       # about 45 min on 2 cores
#
# A round samples 8 answers to each of the first 2000 training problems, keeps the
# right ones whose work shows them (rejection-sample --task countdown: at most 4 per
# problem, the shortest), and fine-tunes the base on them (configs/countdown_rft.yaml).
# Round 1 samples the base; round 2 samples the round-1 model and fine-tunes the
# base again on both rounds' answers. The base's held-out answers are those stored in
# data/runs/ch17_spelled_seed0_cpu. BASE (default runs/spelled_base) is pretrained
# first unless it is already there (23-37 min; deterministic). The two seeds run side
# by side with one torch thread each; a finished step is skipped when the script runs
# again.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
BASE=${BASE:-runs/spelled_base}
. scripts/countdown_cpu_common.sh
pretrain_base spelled "$BASE"

rft_round() {  # rft_round SEED OUT ROUND SAMPLER TRAIN_FILES: sample SAMPLER, keep,
  # fine-tune BASE on TRAIN_FILES (a YAML list) into OUT/roundROUND, evaluate it
  local seed=$1 out=$2 round=$3 sampler=$4 files=$5
  [ -f "$out/round${round}_kept.jsonl" ] ||
    python -m grpo_lib rejection-sample --task countdown --model "$sampler" \
      --n 2000 --k 8 --max-new-tokens 256 --batch-size 128 --seed $((seed + 10 * round)) \
      --max-per-prompt 4 --out "$out/round${round}_kept.jsonl" \
      --yields-csv "$out/round${round}_yields.csv"
  ls -d "$out/round$round"/checkpoint-* > /dev/null 2>&1 ||
    python -m grpo_lib sft --config configs/countdown_rft.yaml \
      --set model_name_or_path="$BASE" --set seed="$seed" --set train_file="$files" \
      --set output_dir="$out/round$round"
  held_out "$(ls -d "$out/round$round"/checkpoint-* | tail -1)" \
    "$out/sampled_eval_round$round.csv"
}

rft_seed() {  # rft_seed SEED OUT: both rounds
  local seed=$1 out=$2
  mkdir -p "$out"
  rft_round "$seed" "$out" 1 "$BASE" "[$out/round1_kept.jsonl]"
  rft_round "$seed" "$out" 2 "$(ls -d "$out/round1"/checkpoint-* | tail -1)" \
    "[$out/round1_kept.jsonl, $out/round2_kept.jsonl]"
}

for seed in 0 1; do
  OMP_NUM_THREADS=1 rft_seed $seed runs/ch17_rft_seed${seed}_cpu \
    >> runs/rft_$seed.log 2>&1 &
done
wait
echo "done"
