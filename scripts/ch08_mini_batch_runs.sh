#!/usr/bin/env bash
# Chapter 8's runs with PPO's mini-batches (num_mini_batches: each rollout of 16
# prompts x G=8 split into k mini-batches, of whole groups unless the arm shuffles
# the rows first, one optimizer update each,
# the ratio taken against the policy that sampled the rollout), one change to chapter
# 7's run, as the stored ch08_mu2 and ch08_mu4 pairs (the transformers rollout):
#   mb2   num_mini_batches = 2: two updates of 8 prompts per rollout
#   mb4   num_mini_batches = 4: four updates of 4 prompts (micro-batches of 32)
#   mb2_shuffled, mb4_shuffled   the same with shuffle_mini_batches: the rollout's
#         128 rows shuffled before the split, as TRL does
# seeds 0 and 1 side by side with one torch thread each; the held-out harness (500
# problems, greedy) at steps 0, 75 and 150.
#
#   bash scripts/ch08_mini_batch_runs.sh   # all four arms, 25-60 min on 2 cores
#   ARMS=mb2 bash scripts/ch08_mini_batch_runs.sh
# writes data/runs/ch08_<arm>_seed{0,1}_cpu with its train.log (OUT=DIR: elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-data/runs}
. scripts/two_seeds.sh
common=("${CH7_STORED[@]}"
        --set eval_every=75 --set print_every=25 --set sample_every=0)
for arm in ${ARMS:-mb2 mb4 mb2_shuffled mb4_shuffled}; do
  case $arm in
    mb2) knobs=(--set num_mini_batches=2) ;;
    mb4) knobs=(--set num_mini_batches=4 --set micro_batch_size=32) ;;
    mb2_shuffled) knobs=(--set num_mini_batches=2 --set shuffle_mini_batches=true) ;;
    mb4_shuffled) knobs=(--set num_mini_batches=4 --set micro_batch_size=32
                         --set shuffle_mini_batches=true) ;;
    *) echo "unknown arm $arm" >&2; exit 2 ;;
  esac
  two_seeds "$OUT/ch08_$arm" "${common[@]}" "${knobs[@]}"
done
