#!/usr/bin/env bash
# Chapter 13's GRPO runs on a CPU, two seeds side by side with one torch thread each:
#   reward_model     the learned reward (configs/ch13_reward_model.yaml)
#   reward_model_kl  the same with a KL penalty toward the base model, beta = 0.04
#   rule             chapter 7's rule reward (configs/r1_zero_arithmetic.yaml)
# seeds 0 and 1, each with the held-out harness (500 problems, greedy) at steps 0,
# 50, 100 and 150; then each final policy's answers to the 500 held-out problems
# (greedy and 4 samples at temperature 1) in answers.jsonl.gz, and the checkpoints
# are removed. The reward model must exist first:
#   python -m grpo_lib train-reward-model      (data/models/tiny-qwen2-reward-model)
#
#   bash scripts/ch13_runs.sh                # all arms, about half an hour on 2 cores
#   ARMS=rule bash scripts/ch13_runs.sh      # one arm
# writes data/runs/ch13_<arm>_seed{0,1}_cpu with its train.log (OUT=DIR: elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-data/runs}
. scripts/two_seeds.sh
common=(--set eval_every=50 --set eval_on_start=true --set eval_n=500
        --set save_every=0 --set save_final=true --set progress_bar=false
        --set print_every=50 --set num_print_samples=1 --set sample_every=25)
for arm in ${ARMS:-reward_model reward_model_kl rule}; do
  case $arm in
    reward_model) args=(--config configs/ch13_reward_model.yaml) ;;
    reward_model_kl) args=(--config configs/ch13_reward_model.yaml --set beta=0.04) ;;
    rule) args=(--config configs/r1_zero_arithmetic.yaml) ;;
    *) echo "unknown arm $arm" >&2; exit 2 ;;
  esac
  two_seeds "$OUT/ch13_$arm" "${args[@]}" "${common[@]}"
  for seed in 0 1; do
    run="$OUT/ch13_${arm}_seed${seed}_cpu"
    last=$(ls -d "$run"/checkpoint-* | sort -V | tail -1)
    OMP_NUM_THREADS=1 python -m grpo_lib eval --model "$last" --n 500 --samples 4 \
      --seed 0 --samples-out "$run/answers.jsonl.gz" > "$run/answers.log" 2>&1 &
  done
  wait
  for seed in 0 1; do rm -rf "$OUT/ch13_${arm}_seed${seed}_cpu"/checkpoint-*; done
done
