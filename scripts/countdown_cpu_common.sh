# Sourced by scripts/countdown_*_cpu.sh: the pieces chapter 17's CPU pipelines share.

pretrain_base() {  # pretrain_base MIX OUT: a tiny Countdown base, unless OUT has one
  [ -f "$2/model.safetensors" ] ||
    python -m grpo_lib pretrain --task countdown --size tiny \
      --init-from data/models/tiny-qwen2-base --countdown-mix "$1" --steps 1000 \
      --batch-size 64 --lr 0.001 --seed 0 --save-dtype bfloat16 --device cpu \
      --eval-n 0 --save-every 250 --out "$2"
}

held_out() {  # held_out MODEL CSV [TOKENS]: chapter 17's held-out protocol, greedy
  # and sampled, within TOKENS new tokens (256), unless CSV is already there
  [ -f "$2" ] || python -m grpo_lib eval --model "$1" --task countdown --n 500 \
    --samples 4 --temperature 1.0 --seed 0 --max-new-tokens "${3:-256}" \
    --batch-size 128 --dtype float32 --csv "$2" \
    --samples-out "${2%.csv}_answers.jsonl.gz"
}

grpo_round() {  # grpo_round MODEL SEED OUT TOKENS [--set KEY=VALUE ...]: 100 steps of
  # GRPO with the spelled runs' settings (and the settings given after TOKENS) within
  # TOKENS new tokens, one torch thread; resumed from OUT's last checkpoint when it
  # has one, skipped when it has its step-100 checkpoint
  local resume=() extra=("${@:5}")
  ls -d "$3"/checkpoint-* > /dev/null 2>&1 && resume=(--set resume_from_checkpoint=latest)
  [ -d "$3/checkpoint-100" ] ||
    OMP_NUM_THREADS=1 python -m grpo_lib train --config configs/countdown_chain_tiny.yaml \
      --set model_name_or_path="$1" --set seed="$2" --set beta=0.04 \
      --set learning_rate=2e-4 --set dynamic_sampling=true --set rollout_engine=fast \
      --set max_steps=100 --set max_completion_length="$4" --set eval_every=0 \
      --set eval_on_start=false --set eval_n=500 --set save_every=50 \
      --set save_final=true --set progress_bar=false --set print_every=10 \
      --set output_dir="$3" "${extra[@]}" "${resume[@]}"
}

held_out_step100() {  # held_out_step100 TOKENS OUT...: held_out on each OUT's
  # checkpoint-100 within TOKENS new tokens, side by side, one torch thread each
  local tokens=$1 out
  shift
  for out in "$@"; do
    OMP_NUM_THREADS=1 held_out "$out/checkpoint-100" "$out/sampled_eval_step100.csv" \
      "$tokens" &
  done
  wait
}
