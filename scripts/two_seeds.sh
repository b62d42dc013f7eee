# Sourced by the chapters' run scripts (scripts/ch*_runs.sh): the two-seed loop they
# share, and the arguments of chapter 7's run as they store it.

two_seeds() {  # two_seeds STEM ARG...: python -m grpo_lib train ARG... for seeds 0
  # and 1 side by side, one torch thread each, into STEM_seed<S>_cpu (its train.log
  # too), and wait for both
  local stem=$1 seed run
  shift
  for seed in 0 1; do
    run="${stem}_seed${seed}_cpu"
    mkdir -p "$run"
    OMP_NUM_THREADS=1 python -m grpo_lib train "$@" --set seed=$seed \
      --set output_dir="$run" > "$run/train.log" 2>&1 &
  done
  wait
}

# chapter 7's run as the chapters store it: the transformers rollout, no checkpoints,
# no progress bar (each script adds its evaluation, logging and the one change)
CH7_STORED=(--config configs/r1_zero_arithmetic.yaml --set rollout_engine=transformers
            --set save_every=0 --set save_final=false --set progress_bar=false)
