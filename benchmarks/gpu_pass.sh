#!/usr/bin/env bash
# The GPU rows of benchmarks/README.md ("CUDA graphs on an H100"), in one run on a
# machine with one CUDA device and the project's packages (TRL for the step):
#
#   bash benchmarks/gpu_pass.sh [LOG_DIR]
#
# 1. the CUDA tests of the graph path (tests/test_graph_decode.py and the trainer's);
# 2. the sampler against transformers' generate and the weight-read floor, 64 rows x
#    128 tokens in bfloat16, with and without CUDA graphs, for the tiny checkpoint and
#    random models of the small shape and of Qwen2.5-0.5B's (forced-length timings do
#    not depend on the weights; the 41 MB small checkpoint stays home);
# 3. one GRPO step against TRL 1.16 (bfloat16) for the tiny and small models, with
#    the trainer's default draw (multinomial, replayed in the graph since 2026-11-30;
#    the H100 rows of 2026-11-28 were measured with --sampler inverse_cdf);
# 4. one step of chapter 21's recipe (configs/qwen25_gsm8k.yaml: 16 prompts x 8
#    completions x 512 tokens, micro-batch 16) on the Qwen2.5-0.5B shape, ours only.
# Rows are appended to benchmarks/results/*.csv; LOG_DIR gets the console log and a
# copy of both CSVs after every command, so a time-out keeps what was measured.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/gpu_pass}
mkdir -p "$out"
log="$out/gpu_pass.log"
S=benchmarks/results/sampler_vs_generate.csv
T=benchmarks/results/step_vs_trl.csv
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log, keep the CSVs
  local name=$1 limit=$2
  shift 2
  echo "== $name ($(date -u +%H:%M:%S))" | tee -a "$log"
  timeout "$limit" "$@" 2>&1 | grep -v "Loading weights" | tee -a "$log"
  echo "== $name: exit ${PIPESTATUS[0]}" | tee -a "$log"
  cp benchmarks/results/*.csv "$out/"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$log"
step tests 150 "$PY" -m pytest -q -p no:cacheprovider tests/test_graph_decode.py \
  "tests/test_trainer.py::test_training_steps_run_on_cuda" \
  "tests/test_trainer.py::test_a_synced_reference_resumes_on_cuda"
SAMPLER=("$PY" benchmarks/sampler_vs_generate.py --device cuda --dtype bfloat16
         --prompts 8 --G 8 --max-new-tokens 128 --runs 3 --csv "$S")
for graph in --cuda-graph --no-cuda-graph; do
  step "sampler tiny $graph" 90 "${SAMPLER[@]}" --model data/models/tiny-qwen2-base \
    "$graph"
  for shape in small qwen2.5-0.5b; do
    step "sampler $shape $graph" 120 "${SAMPLER[@]}" --shape "$shape" "$graph"
  done
done
step "step tiny" 120 "$PY" benchmarks/step_vs_trl.py --dtype bfloat16 --csv "$T"
step "step small" 150 "$PY" benchmarks/step_vs_trl.py --dtype bfloat16 --csv "$T" \
  --shape small
step "recipe step qwen2.5-0.5b" 180 "$PY" benchmarks/step_vs_trl.py --dtype bfloat16 \
  --shape qwen2.5-0.5b --prompts 16 --G 8 --length 512 --micro-batch 16 --skip-trl \
  --warmup 1 --steps 2 --csv "$T"
echo "== done ($(date -u +%H:%M:%S))" | tee -a "$log"
