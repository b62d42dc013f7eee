"""Committed training runs, read back: one setting, several seeds, mean and range.

The book compares settings (a loss, a coefficient, a reward) on runs it keeps under
`data/runs/<stem>_seed<S>_<device>/`, each made by the command in its `README.md`.
One run per setting cannot separate settings a few points apart (two seeds of one
setting differ by that much), so every comparison reads two or more seeds and shows
their mean and their range.

    runs = load_seeds("ch08_dr_grpo")  # seeds 0 and 1, made on a CPU
    final_eval(runs)  # [0.904, 0.934], held-out strict accuracy at the last step
    mean_range(final_eval(runs))  # '0.919 (0.904-0.934)'
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["RUNS_DIR", "Run", "load_run", "load_seeds", "final_eval", "late_mean",
           "early_mean", "mean_range", "seed_order", "compare_seeds",
           "seed_table", "parting_step"]

RUNS_DIR = Path(__file__).resolve().parents[1] / "data" / "runs"


@dataclass
class Run:
    """One committed run: per-step metrics, held-out evaluations, how it was made."""

    name: str
    metrics: pd.DataFrame  # one row per training step
    evals: pd.DataFrame  # one row per evaluation, by step (or mode, if none)
    info: dict = field(default_factory=dict)  # run_info.json: command, device, time


def load_run(name: str, runs_dir: Path | str = RUNS_DIR) -> Run:
    """Read `<runs_dir>/<name>/` (metrics.csv, eval.csv, run_info.json if present)."""
    folder = Path(runs_dir) / name
    if not (folder / "metrics.csv").is_file():
        near = sorted(p.name for p in Path(runs_dir).glob(f"{name.split('_seed')[0]}*"))
        hint = f" Runs with that stem: {', '.join(near)}." if near else ""
        raise FileNotFoundError(
            f"no committed run {folder} (metrics.csv missing).{hint} Each committed "
            f"run's README.md holds the command that made it; run that command to "
            f"make this one, or check the name.")
    evals = _read_evals(folder / "eval.csv")  # [evaluations, columns]
    info_file = folder / "run_info.json"
    info = json.loads(info_file.read_text()) if info_file.is_file() else {}
    metrics = pd.read_csv(folder / "metrics.csv")  # [steps, columns]
    return Run(name, metrics, evals, info)


def load_seeds(stem: str, seeds=(0, 1), device: str = "cpu",
               runs_dir: Path | str = RUNS_DIR) -> list[Run]:
    """The runs `<stem>_seed<S>_<device>` for each seed S, in the order given."""
    if not seeds:
        raise ValueError("load_seeds needs at least one seed")
    return [load_run(f"{stem}_seed{s}_{device}", runs_dir) for s in seeds]


def final_eval(runs: list[Run], column: str = "strict_acc") -> list[float]:
    """Each run's held-out `column` at its last evaluation."""
    missing = [r.name for r in runs if r.evals.empty or column not in r.evals]
    if missing:
        raise ValueError(f"no held-out '{column}' in eval.csv of: {', '.join(missing)}")
    return [float(_last_greedy(r.evals)[column]) for r in runs]


def late_mean(runs: list[Run], column: str, last: int = 25) -> list[float]:
    """Each run's mean of a per-step metric over its last `last` steps."""
    return [float(steps.tail(last).mean()) for steps in _metric(runs, column)]


def mean_range(values, digits: int = 3) -> str:
    """'mean (min-max)' of the seeds' values, e.g. '0.919 (0.904-0.934)', or '-8.2
    (-10.0 to -6.4)' when the smallest is negative; 'n/a' if no seed has a value."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean_range needs at least one value")
    missing = sum(np.isnan(values))
    if missing == len(values):  # a metric these runs do not log (kl with beta = 0)
        return "n/a"
    if missing:
        raise ValueError(f"{missing} of {len(values)} seeds have no value (NaN): "
                         f"{values}; compare runs that log the same metrics")
    return (f"{np.mean(values):.{digits}f} ({min(values):.{digits}f}"
            f"{' to ' if min(values) < 0 else '-'}{max(values):.{digits}f})")


def seed_order(values, others) -> str:
    """'below' or 'above' when every seed of one setting is past every seed of the
    other, 'overlap' when their ranges meet: the most two or three seeds can say."""
    if not len(values) or not len(others):
        raise ValueError("seed_order needs at least one value on each side")
    if max(values) < min(others):
        return "below"
    if min(values) > max(others):
        return "above"
    return "overlap"


def compare_seeds(values, others, name: str) -> str:
    """`seed_order` in words, two seeds a side: 'both seeds below both seeds of X'."""
    order = seed_order(values, others)
    if order == "overlap":
        return f"a seed range overlapping that of {name}"
    return f"both seeds {order} both seeds of {name}"


def seed_table(settings: dict[str, list[Run]], columns: dict, digits=3
               ) -> pd.DataFrame:
    """One row per setting, one 'mean (min-max)' cell per column.

    `columns` maps a column title to a function of a list of runs that returns one
    value per run (such as `final_eval` or `lambda rs: late_mean(rs, "kl")`);
    `digits` is one number for every column or a dict of title -> digits.
    """
    def places(title):
        return digits.get(title, 3) if isinstance(digits, dict) else digits

    rows = {name: {title: mean_range(fn(runs), places(title))
                   for title, fn in columns.items()}
            for name, runs in settings.items()}
    return pd.DataFrame(rows).T


def early_mean(runs: list[Run], column: str, first: int = 10) -> list[float]:
    """Each run's mean of a per-step metric over its first `first` steps."""
    return [float(steps.head(first).mean()) for steps in _metric(runs, column)]


def _read_evals(path: Path) -> pd.DataFrame:
    """eval.csv indexed by step; one written by `grpo_lib eval` (no step) by mode."""
    if not path.is_file():
        return pd.DataFrame()
    evals = pd.read_csv(path)
    key = "step" if "step" in evals else "mode"
    if key not in evals:
        raise ValueError(f"{path} has neither a 'step' nor a 'mode' column: is it an "
                         f"eval.csv written by the trainer or by `grpo_lib eval`?")
    return evals.set_index(key)


def _last_greedy(evals: pd.DataFrame) -> pd.Series:
    """The last evaluation by step, or the greedy row of a step-less eval.csv."""
    return evals.loc["greedy"] if evals.index.name == "mode" else evals.iloc[-1]


def _metric(runs: list[Run], column: str) -> list[pd.Series]:
    """Each run's per-step `column` of metrics.csv; a KeyError names runs without."""
    missing = [r.name for r in runs if column not in r.metrics]
    if missing:
        raise KeyError(f"no column '{column}' in metrics.csv of: {', '.join(missing)}")
    return [r.metrics[column] for r in runs]


def parting_step(a: pd.DataFrame, b: pd.DataFrame,
                 columns=("reward", "completion_length")) -> int | None:
    """The first step at which two runs' per-step metrics ``a`` and ``b`` (aligned by
    row) differ in any of ``columns``; ``None`` when they agree at every step. Two
    runs of one seed that sample the same tokens agree everywhere; once one sampled
    token differs they see other completions, and they part for good."""
    differ = pd.Series(False, index=a.index)
    for column in columns:
        differ |= a[column].ne(b[column])
    return int(a.loc[differ, "step"].min()) if differ.any() else None
