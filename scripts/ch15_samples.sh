#!/usr/bin/env bash
# Chapter 15's samples: three models of the book answer the 500 held-out problems
# once greedily and 16 times at temperature 1 (at most 128 new tokens, seed 0), every
# answer written with its scores to data/runs/ch15_samples/<model>.jsonl.gz and the
# harness's table to <model>.csv. The chapter computes pass@k, majority voting and
# verifier reranking, and looks for self-corrections, from these files. On the CPU:
# about 4 minutes.
#   bash scripts/ch15_samples.sh          (OUT=DIR writes elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-data/runs/ch15_samples}
mkdir -p "$OUT"
for model in tiny-qwen2-base tiny-qwen2-r1-zero tiny-qwen2-reasoning-rl; do
  python -m grpo_lib eval --model "data/models/$model" --n 500 --samples 16 \
    --max-new-tokens 128 --batch-size 256 --seed 0 \
    --csv "$OUT/$model.csv" --samples-out "$OUT/$model.jsonl.gz"
done
