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
    grpo_round "$model" $s $out 384 >> runs/spelled_384_r${round}_$seed.log 2>&1 &
  done
  wait
  if [ $round = 1 ]; then
    held_out_step100 384 runs/ch17_spelled_384_seed{0,1}_cpu
  else
    held_out_step100 384 runs/ch17_spelled_384_round2_seed{0,1}_cpu
  fi
done
echo "done"
