# Sourced by scripts/countdown_{small,spelled_long}_gpu.sh: the pieces chapter 17's
# device calls share. The GPU image has python3 and no virtual environment.

install_wheels() {  # install_wheels DIR: the wheels the GPU image lacks (datasets,
  # dill, multiprocess, math-verify, latex2sympy2_extended, antlr4-python3-runtime),
  # when DIR holds any
  ls "$1"/*.whl > /dev/null 2>&1 || return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site "$1"/*.whl
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
}

device_info() {  # device_info FILE: the GPU, the date, the cores, torch and
  # transformers, written to FILE and shown
  { nvidia-smi --query-gpu=name,memory.total --format=csv; date -u; nproc
    python3 -c "import torch, transformers as t; print(torch.__version__, t.__version__)"
  } > "$1" 2>&1
  cat "$1"
}

held_out() {  # held_out MODEL CSV: chapter 17's held-out protocol (EVAL_N problems,
  # 500 by default; greedy and 4 samples at temperature 1; 256 tokens; float32)
  python3 -m grpo_lib eval --model "$1" --task countdown --n "${EVAL_N:-500}" \
    --samples 4 --temperature 1.0 --seed 0 --max-new-tokens 256 --batch-size 128 \
    --dtype float32 --csv "$2" --samples-out "${2%.csv}_answers.jsonl.gz"
}
