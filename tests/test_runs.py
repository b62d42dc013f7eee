"""grpo_lib.runs: reading committed runs back, seeds, mean and range."""
import json

import pandas as pd
import pytest

from grpo_lib.runs import (RUNS_DIR, compare_seeds, early_mean, final_eval, late_mean,
                           load_run, load_seeds, mean_range, parting_step, seed_order,
                           seed_table)


def write_run(root, name, acc, entropy, with_eval=True):
    folder = root / name
    folder.mkdir(parents=True)
    pd.DataFrame({"step": [1, 2, 3, 4], "entropy": entropy}).to_csv(
        folder / "metrics.csv", index=False)
    if with_eval:
        pd.DataFrame({"step": [0, 150], "strict_acc": [0.5, acc]}).to_csv(
            folder / "eval.csv", index=False)
    (folder / "run_info.json").write_text(json.dumps({"train_seconds": 7}))


def test_load_seeds_reads_every_file_in_seed_order(tmp_path):
    write_run(tmp_path, "x_seed0_cpu", 0.9, [4.0, 3.0, 2.0, 1.0])
    write_run(tmp_path, "x_seed1_cpu", 0.8, [1.0, 1.0, 1.0, 1.0])
    runs = load_seeds("x", seeds=(1, 0), runs_dir=tmp_path)
    assert [r.name for r in runs] == ["x_seed1_cpu", "x_seed0_cpu"]
    assert runs[1].info == {"train_seconds": 7}
    assert list(runs[1].evals.index) == [0, 150]
    assert final_eval(runs) == [0.8, 0.9]  # the last evaluation, not the first
    assert late_mean(runs, "entropy", last=2) == [1.0, 1.5]
    assert early_mean(runs, "entropy", first=2) == [1.0, 3.5]


def test_mean_range_and_seed_table(tmp_path):
    assert mean_range([0.904, 0.93]) == "0.917 (0.904-0.930)"
    assert mean_range([58.24, 67.31], digits=1) == "62.8 (58.2-67.3)"
    assert mean_range([-10.0, -6.4], digits=1) == "-8.2 (-10.0 to -6.4)"
    assert mean_range([-1.4, 0.2], digits=1) == "-0.6 (-1.4 to 0.2)"
    for s, acc in ((0, 0.9), (1, 0.7)):
        write_run(tmp_path, f"a_seed{s}_cpu", acc, [1.0] * 4)
        write_run(tmp_path, f"b_seed{s}_cpu", acc - 0.5, [2.0] * 4)
    settings = {k: load_seeds(k, runs_dir=tmp_path) for k in "ab"}
    table = seed_table(settings, {"held-out": final_eval,
                                  "entropy": lambda rs: late_mean(rs, "entropy")},
                       digits={"entropy": 1})
    assert table.loc["a", "held-out"] == "0.800 (0.700-0.900)"
    assert table.loc["b", "held-out"] == "0.300 (0.200-0.400)"
    assert table.loc["b", "entropy"] == "2.0 (2.0-2.0)"


def test_seed_order_needs_every_seed_past_every_other():
    assert seed_order([0.90, 0.91], [0.92, 0.95]) == "below"
    assert seed_order([0.96, 0.97], [0.92, 0.95]) == "above"
    assert seed_order([0.90, 0.93], [0.92, 0.95]) == "overlap"
    assert seed_order([0.92], [0.92]) == "overlap"  # a tie is not an order
    for values, others in (([], [0.5]), ([0.5], [])):
        with pytest.raises(ValueError, match="at least one value on each side"):
            seed_order(values, others)
    assert compare_seeds([0.90, 0.91], [0.92, 0.95], "grpo") == (
        "both seeds below both seeds of grpo")
    assert compare_seeds([0.90, 0.93], [0.92, 0.95], "grpo") == (
        "a seed range overlapping that of grpo")


def test_missing_run_names_the_runs_that_exist(tmp_path):
    write_run(tmp_path, "x_seed0_cpu", 0.9, [1.0] * 4)
    with pytest.raises(FileNotFoundError, match="x_seed0_cpu"):
        load_seeds("x", seeds=(0, 1), runs_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="README.md"):
        load_run("nothing_here", runs_dir=tmp_path)


def test_bad_requests_raise_clear_errors(tmp_path):
    write_run(tmp_path, "x_seed0_cpu", 0.9, [1.0] * 4, with_eval=False)
    runs = load_seeds("x", seeds=(0,), runs_dir=tmp_path)
    with pytest.raises(ValueError, match="strict_acc"):
        final_eval(runs)
    with pytest.raises(KeyError, match="kl"):
        late_mean(runs, "kl")
    with pytest.raises(KeyError, match="kl"):
        early_mean(runs, "kl")
    with pytest.raises(ValueError):
        load_seeds("x", seeds=(), runs_dir=tmp_path)
    with pytest.raises(ValueError):
        mean_range([])
    assert mean_range([float("nan"), float("nan")]) == "n/a"  # not logged at all
    with pytest.raises(ValueError, match="NaN"):
        mean_range([0.5, float("nan")])  # logged by one seed only: a mistake


def test_committed_pair_reads_back():
    """Chapter 8's committed grpo pair: two seeds, evaluated at steps 0 and 150."""
    runs = load_seeds("ch08_grpo")
    assert [len(r.metrics) for r in runs] == [150, 150]
    assert all(list(r.evals.index) == [0, 150] for r in runs)
    assert all(0.5 < a <= 1.0 for a in final_eval(runs))
    assert RUNS_DIR.name == "runs"


def test_step_less_eval_csv_reads_its_greedy_row(tmp_path):
    # `grpo_lib eval --csv` writes one row per mode and no step column
    write_run(tmp_path, "e_seed0_cpu", 0.9, [1.0] * 4)
    folder = tmp_path / "e_seed0_cpu"
    pd.DataFrame({"mode": ["greedy", "sampled"], "strict_acc": [0.95, 0.80]}).to_csv(
        folder / "eval.csv", index=False)
    run = load_run("e_seed0_cpu", runs_dir=tmp_path)
    assert list(run.evals.index) == ["greedy", "sampled"]
    assert final_eval([run]) == [0.95]


def test_committed_step_less_run_loads():
    run = load_run("ch07_r1_zero_fast_multinomial_seed0_cpu")
    assert final_eval([run])[0] == pytest.approx(0.954)


def test_an_eval_csv_of_another_kind_is_named(tmp_path):
    write_run(tmp_path, "odd_seed0_cpu", 0.9, [1.0] * 4)
    pd.DataFrame({"x": [1]}).to_csv(tmp_path / "odd_seed0_cpu" / "eval.csv", index=False)
    with pytest.raises(ValueError, match="neither a 'step' nor a 'mode'"):
        load_run("odd_seed0_cpu", runs_dir=tmp_path)


def test_parting_step_is_the_first_step_any_column_differs():
    a = pd.DataFrame({"step": [1, 2, 3, 4], "reward": [0.5, 0.6, 0.7, 0.8],
                      "completion_length": [10.0, 11.0, 12.0, 13.0]})
    assert parting_step(a, a.copy()) is None  # the same run
    b = a.assign(completion_length=[10.0, 11.0, 12.5, 13.0])
    assert parting_step(a, b) == 3  # the reward alone agrees throughout
    assert parting_step(a, b, columns=["reward"]) is None
    c = b.assign(reward=[0.5, 0.9, 0.7, 0.8])
    assert parting_step(a, c) == 2
    nan = a.assign(reward=[0.5, float("nan"), 0.7, 0.8])
    assert parting_step(a, nan) == 2  # a missing value is a difference
