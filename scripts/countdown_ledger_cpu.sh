#!/usr/bin/env bash
# Chapter 17, "Keeping the books": a tiny Countdown base pretrained on the ledger
# corpus (the spelled search, each step followed by the numbers it leaves unused),
# one round of GRPO from it (two seeds) and chapter 17's held-out protocol on the
# base and after the round, all within 384 new tokens, on a 2-core CPU:
#
#   bash scripts/countdown_ledger_cpu.sh        # about 1.7 h on 2 cores
#
# BASE (default runs/ledger_base) is pretrained first unless it is already there
# (about 25 min). The two seeds run side by side with one torch thread each; the
# base is evaluated with two. A round that was stopped resumes from its last
# checkpoint when the script runs again. Every run and evaluation writes under
# runs/; the chapter reads the copies in data/runs/ch17_ledger_seed*.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
BASE=${BASE:-runs/ledger_base}
. scripts/countdown_cpu_common.sh
pretrain_base ledger "$BASE"

grpo() {  # grpo MODEL SEED OUT: one round, the 384-token spelled runs' settings
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

mkdir -p runs/ledger_base_eval384
held_out "$BASE" runs/ledger_base_eval384/sampled_eval_step0.csv 384
for seed in 0 1; do
  grpo "$BASE" $seed runs/ch17_ledger_seed${seed}_cpu >> runs/ledger_r1_$seed.log 2>&1 &
done
wait
for seed in 0 1; do
  out=runs/ch17_ledger_seed${seed}_cpu
  OMP_NUM_THREADS=1 held_out $out/checkpoint-100 $out/sampled_eval_step100.csv 384 &
done
wait
echo "done"
