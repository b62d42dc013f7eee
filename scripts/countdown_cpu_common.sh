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
