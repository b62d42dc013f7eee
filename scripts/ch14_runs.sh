#!/usr/bin/env bash
# Chapter 14's runs on a CPU: the mini student (data/models/mini-qwen2-base) five
# ways, two seeds side by side with one torch thread each:
#   rl       GRPO from the student's base, chapter 7's config (R1-Zero on the student)
#   sft      distillation as DeepSeek-R1 does it: SFT on the teacher's filtered
#            answers (data/rejection/kept.jsonl, configs/ch14_distill.yaml)
#   kd       the same answers with the teacher's token distributions (distill_alpha=1)
#   kd_reverse  the same with the reverse KL, KL(student || teacher)
#   sft_rl   GRPO from each seed's distilled student (needs the sft arm first), with
#            the teacher's RL settings of chapter 11 (128 new tokens, learning rate
#            1e-4)
# Every run ends with the harness on the 500 held-out problems (greedy, at most 128
# new tokens, as the teacher's model card): heldout.csv
# and each answer in answers.jsonl.gz. The GRPO runs also evaluate at steps 0, 50,
# 100 and 150 (eval.csv). Checkpoints are removed, except the sft arm's last ones,
# which the sft_rl arm starts from and which are removed after it. Needs:
#   python -m grpo_lib pretrain --size mini ... (data/models/mini-qwen2-base)
#
#   bash scripts/ch14_runs.sh                # all arms
#   ARMS=kd bash scripts/ch14_runs.sh        # one arm
# writes data/runs/ch14_<arm>_seed{0,1}_cpu with its train.log (OUT=DIR: elsewhere).
# STUDENT=DIR TAG=_x starts every arm from another student base and names the runs
# ch14_x_<arm>_...; the chapter's second student, pretrained for 300 steps only:
#   STUDENT=data/models/mini-qwen2-base-300 TAG=_early ARMS="rl sft" \
#     bash scripts/ch14_runs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-data/runs}
STUDENT=${STUDENT:-data/models/mini-qwen2-base}
TAG=${TAG:-}
grpo=(--config configs/r1_zero_arithmetic.yaml --set eval_every=50
      --set eval_on_start=true --set eval_n=500 --set save_every=0
      --set save_final=true --set progress_bar=false --set print_every=50
      --set num_print_samples=1 --set sample_every=25)
distill=(--config configs/ch14_distill.yaml --set progress_bar=false
         --set model_name_or_path=$STUDENT)

last_checkpoint() { ls -d "$1"/checkpoint-* | sort -V | tail -1; }

for arm in ${ARMS:-rl sft kd kd_reverse sft_rl}; do
  for seed in 0 1; do
    run="$OUT/ch14${TAG}_${arm}_seed${seed}_cpu"
    mkdir -p "$run"
    case $arm in
      rl) cmd=(python -m grpo_lib train "${grpo[@]}"
               --set model_name_or_path=$STUDENT) ;;
      sft) cmd=(python -m grpo_lib distill "${distill[@]}") ;;
      kd) cmd=(python -m grpo_lib distill "${distill[@]}" --set distill_alpha=1) ;;
      kd_reverse) cmd=(python -m grpo_lib distill "${distill[@]}" --set distill_alpha=1
                       --set distill_direction=reverse) ;;
      sft_rl) cmd=(python -m grpo_lib train "${grpo[@]}" --set model_name_or_path=$(
                   last_checkpoint "$OUT/ch14${TAG}_sft_seed${seed}_cpu")
                   --set max_completion_length=128 --set learning_rate=1e-4) ;;
      *) echo "unknown arm $arm" >&2; exit 2 ;;
    esac
    OMP_NUM_THREADS=1 "${cmd[@]}" --set seed=$seed --set output_dir="$run" \
      > "$run/train.log" 2>&1 &
  done
  wait
  for seed in 0 1; do
    run="$OUT/ch14${TAG}_${arm}_seed${seed}_cpu"
    OMP_NUM_THREADS=1 python -m grpo_lib eval --model "$(last_checkpoint "$run")" \
      --n 500 --max-new-tokens 128 --seed 0 --csv "$run/heldout.csv" \
      --samples-out "$run/answers.jsonl.gz" > "$run/answers.log" 2>&1 &
  done
  wait
  if [ "$arm" = sft ] && [ -z "$TAG" ]; then  # seed 0's student; chapter 14 runs it
    python -m grpo_lib export --run "$OUT/ch14_sft_seed0_cpu" \
      --out data/models/mini-qwen2-distilled --command-line "OMP_NUM_THREADS=1 \
python -m grpo_lib distill ${distill[*]} --set seed=0 --set output_dir=$OUT/\
ch14_sft_seed0_cpu" > "$OUT/ch14_sft_seed0_cpu/export.log" 2>&1
  fi
  for seed in 0 1; do
    if [ "$arm" != sft ]; then
      rm -rf "$OUT/ch14${TAG}_${arm}_seed${seed}_cpu"/checkpoint-*
    fi
    if [ "$arm" = sft_rl ]; then
      rm -rf "$OUT/ch14${TAG}_sft_seed${seed}_cpu"/checkpoint-*
    fi
  done
done
