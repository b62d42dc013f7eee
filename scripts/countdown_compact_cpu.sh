#!/usr/bin/env bash
# Chapter 17, "More tries in the budget": the compact Countdown base, one round of
# GRPO from it (two seeds, the first round of the spelled runs), and chapter 17's
# held-out protocol on the base and at step 100, on a 2-core CPU:
#
#   bash scripts/countdown_compact_cpu.sh            # about 65 min on 2 cores
#
# BASE (default runs/compact_base) is pretrained first unless it is already there.
# The two seeds run side by side with one torch thread each; the base is pretrained
# and evaluated with two. Every run and evaluation writes under runs/; the chapter
# reads the copies in data/runs/ch17_compact_seed{0,1}_cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
BASE=${BASE:-runs/compact_base}
. scripts/countdown_cpu_common.sh
pretrain_base compact "$BASE"

grpo() {  # grpo MODEL SEED OUT: one round, the spelled runs' settings
  OMP_NUM_THREADS=1 python -m grpo_lib train --config configs/countdown_chain_tiny.yaml \
    --set model_name_or_path="$1" --set seed="$2" --set beta=0.04 \
    --set learning_rate=2e-4 --set dynamic_sampling=true --set rollout_engine=fast \
    --set max_steps=100 --set eval_every=100 --set eval_on_start=false \
    --set eval_n=500 --set save_every=50 --set save_final=true \
    --set progress_bar=false --set print_every=10 --set output_dir="$3"
}

mkdir -p runs/compact_base_eval
held_out "$BASE" runs/compact_base_eval/sampled_eval_step0.csv
for seed in 0 1; do
  grpo "$BASE" $seed runs/ch17_compact_seed${seed}_cpu > runs/compact_r1_$seed.log 2>&1 &
done
wait
held_out_step100 256 runs/ch17_compact_seed{0,1}_cpu
echo "done"
