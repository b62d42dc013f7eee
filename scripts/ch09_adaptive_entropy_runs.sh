#!/usr/bin/env bash
# Chapter 9's runs with Skywork-OR1's adaptive entropy bonus (use_adaptive_entropy,
# TRL's other defaults: the coefficient starts at 0 and moves by 0.005 a step within
# [0, 1]), one change to chapter 7's run, as the stored ch09_entropy_coef pair:
#   target02    entropy_target = 0.2 nats, TRL's default
#   target003   entropy_target = 0.03 nats, about chapter 7's entropy at its start
# seeds 0 and 1 side by side with one torch thread each; the held-out harness (500
# problems, greedy) at steps 0, 75 and 150.
#
#   bash scripts/ch09_adaptive_entropy_runs.sh   # both arms, about 20 min on 2 cores
#   ARMS=target02 bash scripts/ch09_adaptive_entropy_runs.sh
# writes data/runs/ch09_adaptive_<arm>_seed{0,1}_cpu with its train.log (OUT=DIR:
# elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-data/runs}
. scripts/two_seeds.sh
common=("${CH7_STORED[@]}"
        --set eval_every=75 --set print_every=25 --set sample_every=0
        --set use_adaptive_entropy=true)
for arm in ${ARMS:-target02 target003}; do
  case $arm in
    target02) target=0.2 ;;
    target003) target=0.03 ;;
    *) echo "unknown arm $arm" >&2; exit 2 ;;
  esac
  two_seeds "$OUT/ch09_adaptive_$arm" "${common[@]}" --set entropy_target=$target
done
