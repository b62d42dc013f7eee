#!/usr/bin/env bash
# Chapter 17, "A longer budget": two rounds of GRPO from the spelled Countdown base
# with 384 new tokens instead of 256 (two seeds), and chapter 17's held-out protocol
# at 384 tokens on the base and after each round, on a 2-core CPU:
#
#   bash scripts/countdown_spelled384_cpu.sh        # about 2.5 h on 2 cores
#
# BASE (default runs/spelled_base) is pretrained first unless it is already there
# (about 23 min). The two seeds run side by side with one torch thread each; the
# base is evaluated with two. A round that was stopped resumes from its last
# checkpoint when the script runs again. Every run and evaluation writes under
# runs/; the chapter reads the copies in data/runs/ch17_spelled_384{,_round2}_seed*.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
BASE=${BASE:-runs/spelled_base}
. scripts/countdown_cpu_common.sh
pretrain_base spelled "$BASE"

grpo() {  # grpo MODEL SEED OUT: one round, the spelled runs' settings at 384 tokens
  local resume=()
  ls -d "$3"/checkpoint-* > /dev/null 2>&1 && resume=(--set resume_from_checkpoint=latest)
  [ -d "$3/checkpoint-100" ] ||
    OMP_NUM_THREADS=1 python -m grpo_lib train --config configs/countdown_chain_tiny.yaml \
      --set model_name_or_path="$1" --set seed="$2" --set beta=0.04 \
      --set learning_rate=2e-4 --set dynamic_sampling=true --set rollout_engine=fast \
      --set max_steps=100 --set max_completion_length=384 --set eval_every=0 \
      --set eval_on_start=false --set eval_n=500 --set save_every=50 \
      --set save_final=true --set progress_bar=false --set print_every=10 \
      --set output_dir="$3" "${resume[@]}"
}

mkdir -p runs/spelled_base_eval384
held_out "$BASE" runs/spelled_base_eval384/sampled_eval_step0.csv 384
for round in 1 2; do
  for seed in 0 1; do
    if [ $round = 1 ]; then
      model=$BASE; out=runs/ch17_spelled_384_seed${seed}_cpu; s=$seed
    else
      model=runs/ch17_spelled_384_seed${seed}_cpu/checkpoint-100
      out=runs/ch17_spelled_384_round2_seed${seed}_cpu; s=1$seed
    fi
    grpo "$model" $s $out >> runs/spelled_384_r${round}_$seed.log 2>&1 &
  done
  wait
  for seed in 0 1; do
    out=runs/ch17_spelled_384_seed${seed}_cpu
    [ $round = 2 ] && out=runs/ch17_spelled_384_round2_seed${seed}_cpu
    OMP_NUM_THREADS=1 held_out $out/checkpoint-100 $out/sampled_eval_step100.csv 384 &
  done
  wait
done
echo "done"
