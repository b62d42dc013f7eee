"""Checkers for chapter 20 (asynchronous RL). Solutions: book/solutions/ch20.md."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from ..async_rl import simulate_schedule
from ..losses import sampling_importance_weights


# --------------------------------------------------------- 20.1 the schedule by hand
def reference_schedule(generate_s, update_s, max_staleness, steps) -> list[int]:
    """The versions that sample batches 0..steps-1 (:func:`simulate_schedule`)."""
    frame = simulate_schedule(generate_s, update_s, max_staleness, steps)
    return [int(v) for v in frame["version"]]


_SCHEDULE_CASES = [(1.0, 2.0, 0, 6), (1.0, 2.0, 1, 6), (1.0, 2.0, 3, 8),
                   (2.0, 1.0, 0, 6), (2.0, 1.0, 2, 6), (1.2, 1.7, 4, 10),
                   (1.0, 1.0, 1, 5)]


def check_schedule(fn) -> bool:
    """Check ``fn(generate_s, update_s, max_staleness, steps) -> list[int]``."""
    for case in _SCHEDULE_CASES:
        expected = reference_schedule(*case)
        got = fn(*case)
        try:
            got = [int(v) for v in got]
        except (TypeError, ValueError):
            raise AssertionError(f"{case}: expected a list of {case[3]} versions, got "
                                 f"{got!r:.80}.") from None
        if got == expected:
            continue
        g, u, eta, steps = case
        hint = ""
        if got == [max(0, s - eta) for s in range(steps)]:
            hint = (" The bound is the oldest allowed version; the worker samples "
                    "with the newest one published when it starts.")
        elif got == list(range(steps)):
            hint = (" That is the synchronous schedule; with max_staleness > 0 it "
                    "runs ahead.")
        raise AssertionError(f"(generate, update, max_staleness, steps) = {case}: "
                             f"expected {expected}, got {got}.{hint}")
    print("check_schedule: the versions match in all seven schedules.")
    return True


# --------------------------------------------------------- 20.2 the behaviour weight
def reference_behaviour_weight(prox_logp, behav_logp, cap) -> list[float]:
    """:func:`grpo_lib.losses.sampling_importance_weights` in ``token_truncate`` mode:
    :math:`\\min(\\pi_{\\text{prox}} / \\pi_{\\text{behav}}, c)`."""
    prox = torch.tensor([prox_logp], dtype=torch.float64)
    behav = torch.tensor([behav_logp], dtype=torch.float64)
    weights = sampling_importance_weights(prox, behav, torch.ones_like(prox),
                                          "token_truncate", None, cap)
    return weights[0].tolist()


_WEIGHT_CASES = [
    ([-1.0, -2.0, -0.5], [-1.0, -2.0, -0.5], 5.0),
    ([-0.1, -3.0, -1.0], [-0.5, -2.0, -1.2], 5.0),
    ([-0.01, -4.0], [-3.0, -0.2], 5.0),
    ([-0.2, -0.9, -2.5, -0.05], [-0.4, -0.6, -2.0, -2.2], 2.0),
]


def check_behaviour_weight(fn) -> bool:
    """Check ``fn(prox_logp, behav_logp, cap) -> list[float]``."""
    for prox, behav, cap in _WEIGHT_CASES:
        expected = reference_behaviour_weight(prox, behav, cap)
        got = fn(list(prox), list(behav), cap)
        try:
            got = [float(v) for v in got]
        except (TypeError, ValueError):
            raise AssertionError(f"expected a list of {len(prox)} numbers, got "
                                 f"{got!r:.80}.") from None
        if len(got) == len(expected) and np.allclose(got, expected, rtol=1e-6,
                                                     atol=1e-9):
            continue
        inverted = [min(math.exp(b - p), cap) for p, b in zip(prox, behav)]
        uncapped = [math.exp(p - b) for p, b in zip(prox, behav)]
        hint = ""
        if len(got) == len(inverted) and np.allclose(got, inverted, rtol=1e-6):
            hint = " Upside down: the weight is pi_prox / pi_behav."
        elif len(got) == len(uncapped) and np.allclose(got, uncapped, rtol=1e-6):
            hint = f" Truncate at the cap ({cap})."
        raise AssertionError(f"prox {prox}, behav {behav}, cap {cap}: expected "
                             f"{[round(v, 6) for v in expected]}, got "
                             f"{[round(v, 6) for v in got]}.{hint}")
    print("check_behaviour_weight: fresh, stale and capped tokens weighted right.")
    return True


# ----------------------------------------------------------- 20.3 what overlap can buy
def reference_sync_speedup(metrics: pd.DataFrame) -> float:
    """:math:`(t_{gen} + t_{upd}) / \\max(t_{gen}, t_{upd})`, medians after step 1."""
    later = metrics[metrics["step"] > 1]
    g, u = later["time_generate"].median(), later["time_update"].median()
    return float((g + u) / max(g, u))


def _speedup_cases():
    rng = np.random.default_rng(20)
    cases = []
    for g, u in ((1.2, 1.7), (2.0, 1.0), (1.0, 1.0)):
        n = 12
        frame = pd.DataFrame({"step": np.arange(1, n + 1),
                              "time_generate": g + 0.1 * rng.standard_normal(n),
                              "time_update": u + 0.1 * rng.standard_normal(n)})
        frame.loc[0, ["time_generate", "time_update"]] = [9.0, 6.0]  # warm-up
        cases.append(frame)
    return cases


def check_sync_speedup(fn) -> bool:
    """Check ``fn(metrics: DataFrame) -> float``."""
    for frame in _speedup_cases():
        expected = reference_sync_speedup(frame)
        got = fn(frame.copy())
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise AssertionError(f"expected a number, got {got!r}.") from None
        if math.isclose(got, expected, rel_tol=1e-9):
            continue
        later = frame[frame.step > 1]
        with_first = ((frame.time_generate.median() + frame.time_update.median())
                      / max(frame.time_generate.median(), frame.time_update.median()))
        means = ((later.time_generate.mean() + later.time_update.mean())
                 / max(later.time_generate.mean(), later.time_update.mean()))
        hint = ""
        if math.isclose(got, with_first, rel_tol=1e-9):
            hint = " Leave out step 1: it carries the warm-up."
        elif math.isclose(got, means, rel_tol=1e-9):
            hint = " Use medians: one slow step should not move the estimate."
        elif math.isclose(got, 1 / expected, rel_tol=1e-9):
            hint = " Upside down: the ratio of synchronous to asynchronous time."
        raise AssertionError(f"expected {expected:.4f}, got {got:.4f}.{hint}")
    print("check_sync_speedup: right for a fast sampler, a slow one and a tie.")
    return True
