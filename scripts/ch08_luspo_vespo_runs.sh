#!/usr/bin/env bash
# Chapter 8's runs of TRL's two sequence-level losses, on chapter 7's configuration
# with two passes per batch (num_iterations=2), so that the second pass is off-policy:
#   luspo_mu2   loss_type=luspo with GSPO's sequence ratio and clip (3e-4 / 4e-4), as
#               the stored ch08_gspo_mu2 pair: the same ratio, each completion's loss
#               times its length
#   vespo_mu2   loss_type=vespo with TRL's gamma weights (k, lambda: 2, 3 for A >= 0;
#               3, 2 for A < 0), as the stored ch08_sapo_mu2 and ch08_mu2_fast pairs
#   dapo_mu2    loss_type=dapo: VESPO's aggregation (a token mean) without its
#               weights, the control that separates the two
# seeds 0 and 1 side by side with one torch thread each, the trainer's default rollout
# engine; the held-out harness (500 problems, greedy) at steps 75 and 150.
#
#   bash scripts/ch08_luspo_vespo_runs.sh        # three arms, about 40 min on 2 cores
#   ARMS=vespo_mu2 bash scripts/ch08_luspo_vespo_runs.sh
# writes data/runs/ch08_<arm>_seed{0,1}_cpu with its train.log (OUT=DIR: elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-data/runs}
. scripts/two_seeds.sh
common=(--config configs/r1_zero_arithmetic.yaml --set num_iterations=2
        --set save_every=0 --set save_final=false --set progress_bar=false
        --set eval_every=75 --set print_every=25 --set sample_every=0)
for arm in ${ARMS:-luspo_mu2 vespo_mu2 dapo_mu2}; do
  case $arm in
    luspo_mu2) extra=(--set loss_type=luspo --set importance_sampling_level=sequence
                      --set epsilon=3e-4 --set epsilon_high=4e-4) ;;
    vespo_mu2) extra=(--set loss_type=vespo) ;;
    dapo_mu2) extra=(--set loss_type=dapo) ;;
    *) echo "unknown arm $arm" >&2; exit 2 ;;
  esac
  two_seeds "$OUT/ch08_$arm" "${common[@]}" "${extra[@]}"
done
