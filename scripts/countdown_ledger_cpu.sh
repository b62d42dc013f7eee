#!/usr/bin/env bash
# Chapter 17, "Keeping the books": a tiny Countdown base pretrained on the ledger
# corpus (the spelled search, each step followed by the numbers it leaves unused),
# one round of GRPO from it (two seeds) and chapter 17's held-out protocol on the
# base and after the round, all within 384 new tokens, on a 2-core CPU:
#
#   bash scripts/countdown_ledger_cpu.sh        # about 1.4 h on 2 cores
#
# BASE (default runs/ledger_base) is pretrained first unless it is already there
# (about 28 min). The two seeds run side by side with one torch thread each; the
# base is evaluated with two. A round that was stopped resumes from its last
# checkpoint when the script runs again. Every run and evaluation writes under
# runs/; the chapter reads the copies in data/runs/ch17_ledger_seed*.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
BASE=${BASE:-runs/ledger_base}
. scripts/countdown_cpu_common.sh
pretrain_base ledger "$BASE"

mkdir -p runs/ledger_base_eval384
held_out "$BASE" runs/ledger_base_eval384/sampled_eval_step0.csv 384
for seed in 0 1; do
  grpo_round "$BASE" $seed runs/ch17_ledger_seed${seed}_cpu 384 >> runs/ledger_r1_$seed.log 2>&1 &
done
wait
held_out_step100 384 runs/ch17_ledger_seed{0,1}_cpu
echo "done"
