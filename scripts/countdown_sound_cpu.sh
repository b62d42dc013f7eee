#!/usr/bin/env bash
# Chapter 17, "A reward for sound work": one round of GRPO from the chain base (two
# seeds) with a dense reward beside the answer reward: the share of a trace's
# attempts that are sound work (every step right, each step continuing the one
# before, each given number brought in once), then chapter 17's held-out protocol
# after the round, within 256 new tokens, on a 2-core CPU:
#
#   bash scripts/countdown_sound_cpu.sh       # about 40 min on 2 cores
#
# The reward is r = countdown_worked_answer_reward
# + 0.5 * countdown_sound_attempt_reward; dynamic sampling keeps the groups whose
# total reward varies. Everything else is the spelled round's (grpo_round): beta
# 0.04, lr 2e-4, 16 prompts x 8 answers, 100 steps. The base is the committed
# data/models/tiny-qwen2-countdown-chain-base, whose held-out answers are stored in
# data/runs/ch17_chain_anchored_seed0_cpu. The two seeds run side by side with one
# torch thread each. A round that was stopped resumes from its last checkpoint when
# the script runs again.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
BASE=data/models/tiny-qwen2-countdown-chain-base
. scripts/countdown_cpu_common.sh

for seed in 0 1; do
  grpo_round "$BASE" $seed runs/ch17_chain_sound_seed${seed}_cpu 256 \
    --set "reward_funcs=[countdown_worked_answer_reward, countdown_answer_reward, countdown_format_reward, countdown_value_only_reward, countdown_sound_attempt_reward]" \
    --set "reward_weights=[1.0, 0.0, 0.0, 0.0, 0.5]" \
    >> runs/chain_sound_$seed.log 2>&1 &
done
wait
held_out_step100 256 runs/ch17_chain_sound_seed{0,1}_cpu
echo "done"
