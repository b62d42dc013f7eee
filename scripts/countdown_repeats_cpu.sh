#!/usr/bin/env bash
# Chapter 17, "A reward against repeats": one round of GRPO from the spelled base
# (two seeds) with a penalty for working out an attempt twice beside the answer
# reward, then chapter 17's held-out protocol after the round, within 256 new
# tokens, on a 2-core CPU:
#
#   bash scripts/countdown_repeats_cpu.sh       # about 1.5 h on 2 cores
#
# The reward is r = countdown_worked_answer_reward + 0.5 * countdown_repeat_penalty
# (minus the share of a trace's attempts that repeat an earlier one); dynamic
# sampling keeps the groups whose answer reward varies
# (dynamic_sampling_metric=countdown_worked_answer_reward), the groups the spelled
# round trained on. Everything else is the spelled round's (grpo_round).
# BASE (default runs/spelled_base) is pretrained first unless it is already there
# (23-37 min); its pretraining is deterministic, so the base's held-out answers are
# those stored in data/runs/ch17_spelled_seed0_cpu (compare the loss logs). The
# two seeds run side by side with one torch thread each. A round that was stopped
# resumes from its last checkpoint when the script runs again.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
BASE=${BASE:-runs/spelled_base}
. scripts/countdown_cpu_common.sh
pretrain_base spelled "$BASE"

for seed in 0 1; do
  grpo_round "$BASE" $seed runs/ch17_spelled_repeats_seed${seed}_cpu 256 \
    --set "reward_funcs=[countdown_worked_answer_reward, countdown_answer_reward, countdown_format_reward, countdown_value_only_reward, countdown_repeat_penalty]" \
    --set "reward_weights=[1.0, 0.0, 0.0, 0.0, 0.5]" \
    --set dynamic_sampling_metric=countdown_worked_answer_reward \
    >> runs/spelled_repeats_$seed.log 2>&1 &
done
wait
held_out_step100 256 runs/ch17_spelled_repeats_seed{0,1}_cpu
echo "done"
