# Sourced by the chapters' run scripts (scripts/ch*_runs.sh): the two-seed loop they
# share.

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
