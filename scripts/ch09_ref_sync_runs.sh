#!/usr/bin/env bash
# Chapter 9's runs with a moving KL reference: chapter 7's configuration at beta = 5,
# as the stored ch09_beta5 pair, with the reference synced every 10 steps:
#   reset10   ref_model_mixup_alpha = 1: the reference becomes the policy (ProRL)
#   mix10     ref_model_mixup_alpha = 0.6: TR-DPO's soft update (TRL's default alpha)
# seeds 0 and 1 side by side with one torch thread each; the held-out harness (500
# problems, greedy) at step 150.
#
#   bash scripts/ch09_ref_sync_runs.sh           # both arms, about 30 min on 2 cores
#   ARMS=reset10 bash scripts/ch09_ref_sync_runs.sh
# writes data/runs/ch09_beta5_<arm>_seed{0,1}_cpu with its train.log (OUT=DIR:
# elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-data/runs}
. scripts/two_seeds.sh
common=("${CH7_STORED[@]}"
        --set eval_on_start=false --set eval_every=150 --set print_every=25
        --set sample_every=0 --set beta=5.0 --set sync_ref_model=true
        --set ref_model_sync_steps=10)
for arm in ${ARMS:-reset10 mix10}; do
  case $arm in
    reset10) alpha=1.0 ;;
    mix10) alpha=0.6 ;;
    *) echo "unknown arm $arm" >&2; exit 2 ;;
  esac
  two_seeds "$OUT/ch09_beta5_$arm" "${common[@]}" --set ref_model_mixup_alpha=$alpha
done
