#!/usr/bin/env bash
# Chapter 15's runs on a CPU: chapter 7's R1-Zero recipe from the tiny base, two
# seeds side by side with one torch thread each, with two rewards:
#   outcome  accuracy + 0.1 format (chapter 7's config as it is)
#   process  the same plus process_reward (every step of the reasoning right,
#            grpo_lib.test_time.step_labels), weight 1
#   cold_outcome  chapter 11's RL after the cold start as it made
#            data/models/tiny-qwen2-reasoning-rl (accuracy + 0.1 format + 0.2
#            language, 128 new tokens, learning rate 1e-4)
#   cold_process  the same plus process_reward, weight 1: does paying for true
#            steps keep the cold start's checks true?
# Each run logs its whole rollout batch every 10 steps (samples.jsonl: where the
# chapter looks for self-corrections over training) and evaluates greedily at steps
# 0, 50, 100, 150 (eval.csv). The final policy then answers the 500 held-out
# problems once greedily and 16 times at temperature 1, as scripts/ch15_samples.sh
# does for the book's models (heldout.csv, answers.jsonl.gz); the checkpoint is then
# removed.
#   bash scripts/ch15_runs.sh               # all four arms (about 50 minutes)
#   ARMS=process bash scripts/ch15_runs.sh  # one arm
# writes data/runs/ch15_<arm>_seed{0,1}_cpu with its train.log (OUT=DIR: elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-data/runs}
grpo=(--config configs/r1_zero_arithmetic.yaml --set eval_every=50
      --set eval_on_start=true --set eval_n=500 --set save_every=0
      --set save_final=true --set progress_bar=false --set print_every=50
      --set num_print_samples=1 --set sample_every=10)

cold=(--set model_name_or_path=data/models/tiny-qwen2-cold-start
      --set max_completion_length=128 --set learning_rate=1e-4)
lang="accuracy_reward, format_reward, language_consistency_reward"

for arm in ${ARMS:-outcome process cold_outcome cold_process}; do
  for seed in 0 1; do
    run="$OUT/ch15_${arm}_seed${seed}_cpu"
    mkdir -p "$run"
    case $arm in
      outcome) extra=() ;;
      process) extra=(
        --set 'reward_funcs=[accuracy_reward, format_reward, process_reward]'
        --set 'reward_weights=[1.0, 0.1, 1.0]') ;;
      cold_outcome) extra=("${cold[@]}" --set "reward_funcs=[$lang]"
        --set 'reward_weights=[1.0, 0.1, 0.2]') ;;
      cold_process) extra=("${cold[@]}" --set "reward_funcs=[$lang, process_reward]"
        --set 'reward_weights=[1.0, 0.1, 0.2, 1.0]') ;;
      *) echo "unknown arm $arm" >&2; exit 2 ;;
    esac
    OMP_NUM_THREADS=1 python -m grpo_lib train "${grpo[@]}" ${extra[@]+"${extra[@]}"} \
      --set seed=$seed --set output_dir="$run" > "$run/train.log" 2>&1 &
  done
  wait
  for seed in 0 1; do
    run="$OUT/ch15_${arm}_seed${seed}_cpu"
    last=$(ls -d "$run"/checkpoint-* | sort -V | tail -1)
    OMP_NUM_THREADS=1 python -m grpo_lib eval --model "$last" --n 500 --samples 16 \
      --max-new-tokens 128 --batch-size 256 --seed 0 --csv "$run/heldout.csv" \
      --samples-out "$run/answers.jsonl.gz" > "$run/answers.log" 2>&1 &
  done
  wait
  for seed in 0 1; do
    rm -rf "$OUT/ch15_${arm}_seed${seed}_cpu"/checkpoint-*
  done
done
