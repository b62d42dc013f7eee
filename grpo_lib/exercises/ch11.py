"""Checkers for chapter 11 (language consistency, GDPO). Solutions:
book/solutions/ch11.md."""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import torch

from ..advantages import decoupled_advantages, group_advantages, habit_advantage
from ..rewards import language_consistency_reward


# ------------------------------------------------------------- 11.1 language share
def reference_language_share(reasoning: str) -> float:
    """Share of English (Latin-script) units in a reasoning text.

    .. math:: r = \\frac{u_\\text{latin}}{u_\\text{latin} + u_\\text{cjk}}

    One unit per Latin word, one per CJK character; digits and symbols are no
    language. A reasoning without any unit scores 1.0, a blank one 0.0 (the library's
    ``language_consistency_reward`` on a completion whose think block is
    ``reasoning``).
    """
    completion = f"<think> {reasoning} </think> <answer> 0 </answer>"
    return language_consistency_reward([completion], language="en")[0]


_SHARE_CASES = [
    "First 3 * 4 = 12, then 2 + 12 = 14.",
    "首先 3 * 4 = 12, 然后 2 + 12 = 14.",
    "First 3 * 4 = 12, 然后 2 + 12 = 14.",
    "3 * 4 = 12, 2 + 12 = 14",
    "First 9 - 2 = 7, 现在 7 * 3. Finally 7 * 3 = 21.",
    "先算乘法：3 * 4 = 12，再算加法：2 + 12 = 14。",
    "The answer is 答案是 14",
    "   ",
]


def check_language_share(fn) -> bool:
    """Check ``fn(reasoning: str) -> float``: the share of English units.

    Known values: ``"First 3 * 4 = 12, 然后 2 + 12 = 14."`` -> 1/3 (one English word,
    two Chinese characters); ``"3 * 4 = 12, 2 + 12 = 14"`` -> 1.0.
    """
    for text in _SHARE_CASES:
        expected = reference_language_share(text)
        got = fn(text)
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise AssertionError(f"{text!r}: expected a number, got {got!r}.") from None
        if math.isclose(got, expected, abs_tol=1e-9):
            continue
        latin = len(re.findall(r"[A-Za-z]+", text))
        cjk_runs = len(re.findall(r"[\u4e00-\u9fff]+", text))
        hint = ""
        if not text.strip():
            hint = (" A blank reasoning has nothing to be consistent: the reward's "
                    "floor, 0.")
        elif latin + cjk_runs and math.isclose(got, latin / (latin + cjk_runs)):
            hint = (" Chinese writes no spaces: count each CJK character as one "
                    "unit, not each run of characters.")
        elif expected == 1.0 and got == 0.0:
            hint = (" A reasoning made only of digits and symbols mixes no languages: "
                    "it is consistent with every language.")
        elif math.isclose(got, 1.0 - expected):
            hint = " That is the share of Chinese units; the target is English."
        raise AssertionError(f"{text!r}: expected {expected:.4f}, got {got:.4f}.{hint}")
    print("check_language_share: English, Chinese, mixed, digits-only and blank "
          "reasoning all scored as the reward does.")
    return True


# -------------------------------------------------------- 11.2 normalise then sum
def reference_normalize_then_sum(rewards_per_func, weights, group_size) -> list[float]:
    """GDPO's advantages: :func:`grpo_lib.advantages.decoupled_advantages`.

    .. math:: s_i = \\sum_k w_k \\frac{r_{i,k} - \\bar r_{g,k}}{\\sigma_{g,k} +
       \\epsilon_{\\mathrm{std}}}, \\qquad \\hat A_i = \\frac{s_i - \\bar s}{\\sigma_s +
       \\epsilon_{\\mathrm{std}}}

    (sample standard deviations, :math:`\\epsilon_{\\mathrm{std}} = 10^{-4}`).
    """
    return decoupled_advantages(torch.tensor(rewards_per_func, dtype=torch.float32),
                                list(weights), group_size).tolist()


def _gdpo_cases():
    g = torch.Generator().manual_seed(11)
    acc = (torch.rand(16, generator=g) < 0.6).float()
    lang = torch.where(torch.rand(16, generator=g) < 0.3, 0.0, 1.0)
    fmt = (torch.rand(16, generator=g) < 0.8).float()
    random_batch = torch.stack([acc, fmt, lang], dim=1).tolist()
    return [
        # accuracy [1, 1, 0, 0], language [1, 0.5, 1, 1]: one group
        ("one group of 4", [[1, 1], [1, 0.5], [0, 1], [0, 1]], [1.0, 0.2], 4),
        # group 1: both rewards vary; group 2: only the language reward varies
        ("two groups of 4", [[1, 1.0], [1, 0.5], [0, 1.0], [0, 1.0],
                             [1, 1.0], [1, 1.0], [1, 1.0], [1, 0.0]], [1.0, 0.2], 4),
        ("a dead group", [[1, 1], [0, 1], [1, 1], [1, 1], [1, 1], [1, 1]],
         [1.0, 0.2], 3),
        ("four groups of 4, three rewards", random_batch, [1.0, 0.1, 0.2], 4),
    ]


def check_normalize_then_sum(fn) -> bool:
    """Check ``fn(rewards_per_func: list[list[float]] (B x K), weights, group_size)
    -> list[float]`` (B advantages), against ``decoupled_advantages``."""
    for name, rows, weights, G in _gdpo_cases():
        expected = reference_normalize_then_sum(rows, weights, G)
        raw = fn([list(r) for r in rows], list(weights), G)
        try:
            got = [float(x) for x in raw]
        except (TypeError, ValueError):
            raise AssertionError(f"{name}: expected a list of {len(rows)} numbers, got "
                                 f"{raw!r:.80}.") from None
        if len(got) != len(expected):
            raise AssertionError(f"{name}: expected {len(expected)} advantages (one "
                                 f"per completion), got {len(got)}.")
        if all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(got, expected)):
            continue
        r = torch.tensor(rows, dtype=torch.float32)
        total = (r * torch.tensor(weights)).sum(1)
        summed_first = group_advantages(total, G).tolist()
        hint = ""
        if all(math.isclose(a, b, abs_tol=1e-3) for a, b in zip(got, summed_first)):
            hint = (" These are GRPO's advantages of the weighted sum; normalise each "
                    "reward column inside its group first, then sum.")
        elif all(math.isclose(a, b, abs_tol=1e-3)
                 for a, b in zip(got, _no_batch_step(r, weights, G))):
            hint = (" Right up to a scale: the last step standardises the weighted "
                    "sums over the whole batch.")
        elif all(math.isclose(a, b, abs_tol=1e-3)
                 for a, b in zip(got, _no_batch_step(r, weights, G, correction=0))):
            hint = (" Right up to a scale, and with the population std: use the "
                    "sample std (divide by G - 1), then standardise over the batch.")
        elif _same_sign_pattern(got, expected):
            hint = (" The signs are right but not the sizes: use the sample std "
                    "(divide by G - 1) in both steps and epsilon_std = 1e-4.")
        shown = ", ".join(f"{x:+.3f}" for x in expected[:8])
        mine = ", ".join(f"{x:+.3f}" for x in got[:8])
        raise AssertionError(f"{name}, weights {weights}: expected [{shown}"
                             f"{', ...' if len(expected) > 8 else ''}], got [{mine}"
                             f"{', ...' if len(got) > 8 else ''}].{hint}")
    print("check_normalize_then_sum: matches decoupled_advantages (per-reward group "
          "normalisation, weighted sum, batch standardisation, dead groups at 0).")
    return True


def _no_batch_step(r: torch.Tensor, weights, G: int, correction: int = 1) -> list:
    grouped = r.view(-1, G, r.shape[1])  # [groups, G, K]
    centred = grouped - grouped.mean(1, keepdim=True)
    scaled = centred / (grouped.std(1, keepdim=True, correction=correction) + 1e-4)
    return (scaled * torch.tensor(weights)).sum(-1).reshape(-1).tolist()


def _same_sign_pattern(a, b) -> bool:
    return all((x > 1e-6) == (y > 1e-6) and (x < -1e-6) == (y < -1e-6)
               for x, y in zip(a, b))


# ---------------------------------------------------- 11.3 lower in every seed
def reference_lower_in_every_seed(treated: dict, control: dict,
                                  column: str = "lang_mix_rate") -> bool:
    """Whether ``column`` at the final evaluation is strictly lower in the treated run
    than in its control, in every seed.

    ``treated`` and ``control`` map a seed to that run's ``eval.csv`` table (a
    DataFrame with a ``step`` column); the final evaluation is the row with the
    largest step. Both must hold the same seeds.
    """
    if set(treated) != set(control):
        raise ValueError(f"seeds differ: {sorted(treated)} vs {sorted(control)}")

    def final(frame):
        return frame.loc[frame["step"].idxmax(), column]

    return all(final(treated[s]) < final(control[s]) for s in treated)


def _eval(steps, values, column="lang_mix_rate"):
    return pd.DataFrame({"step": steps, column: values,
                         "strict_acc": [0.5 + 0.001 * s for s in steps]})


def _seed_cases():
    s25, s50 = [0, 25, 50, 75, 100, 125, 150], [0, 50, 100, 150]
    return [
        ("lower in both seeds",
         {0: _eval(s25, [.18, 0, 0, 0, 0, 0, 0]),
          1: _eval(s25, [.18, .02, 0, 0, 0, 0, .01])},
         {0: _eval(s25, [.18, .3, .26, .25, .24, .25, .25]),
          1: _eval(s25, [.18, .2, .2, .2, .2, .19, .2])}, True),
        ("lower in one seed only (the mean is lower)",
         {0: _eval(s50, [.18, .0, .0, .0]), 1: _eval(s50, [.18, .1, .15, .22])},
         {0: _eval(s50, [.18, .3, .3, .3]), 1: _eval(s50, [.18, .2, .2, .2])}, False),
        ("zero in both arms: equal is not lower",
         {0: _eval(s50, [0, 0, 0, 0]), 1: _eval(s50, [0, 0, 0, 0])},
         {0: _eval(s50, [0, 0, 0, 0]), 1: _eval(s50, [0, 0, 0, 0])}, False),
        ("lower at the start, higher at the end",
         {0: _eval(s50, [.1, .3, .3, .3]), 1: _eval(s50, [.1, .3, .3, .3])},
         {0: _eval(s50, [.2, .1, .1, .1]), 1: _eval(s50, [.2, .1, .1, .1])}, False),
        ("rows out of order (the final evaluation is the largest step)",
         {0: _eval([150, 0, 50, 100], [.0, .18, .3, .3]),
          1: _eval([150, 0, 50, 100], [.01, .18, .3, .3])},
         {0: _eval([0, 50, 100, 150], [.18, .1, .1, .1]),
          1: _eval([0, 50, 100, 150], [.18, .1, .1, .1])}, True),
        ("different schedules (every 25 vs every 50 steps), three seeds",
         {0: _eval(s25, [.2, .1, .05, 0, 0, 0, 0]), 1: _eval(s25, [.2] + [0] * 6),
          2: _eval(s25, [.2, .2, .1, .1, .05, .01, .02])},
         {0: _eval(s50, [.2, .25, .3, .3]), 1: _eval(s50, [.2, .25, .3, .3]),
          2: _eval(s50, [.2, .25, .3, .03])}, True),
    ]


def check_lower_in_every_seed(fn) -> bool:
    """Check ``fn(treated: {seed: eval DataFrame}, control: {seed: eval DataFrame},
    column) -> bool``: is ``column`` lower at the final evaluation in every seed?"""
    for name, treated, control, expected in _seed_cases():
        got = fn({s: f.copy() for s, f in treated.items()},
                 {s: f.copy() for s, f in control.items()}, "lang_mix_rate")
        if not isinstance(got, (bool, np.bool_)):
            raise AssertionError(f"{name}: expected True or False, got {got!r}.")
        if bool(got) == expected:
            continue
        hint = ""
        if "one seed only" in name:
            hint = (" One seed must not carry the other: compare seed by seed, not "
                    "the mean over seeds.")
        elif "equal" in name:
            hint = " Both arms are at 0: equal is not lower, use a strict <."
        elif "start" in name:
            hint = " Compare the final evaluation, not the first one."
        elif "out of order" in name:
            hint = (" The rows are not sorted: the final evaluation is the row with "
                    "the largest step, not the last row.")
        elif "schedules" in name:
            hint = (" The tables have different numbers of rows: compare each run's "
                    "own final evaluation, not rows by position.")
        raise AssertionError(f"{name}: expected {expected}, got {bool(got)}.{hint}")
    print("check_lower_in_every_seed: seed by seed, final evaluation, strict <.")
    return True


# ------------------------------------------------------------ 11.5 habit advantage
def reference_habit_advantage(rewards, has_habit, group_size) -> float:
    """Mean group-relative advantage of the completions with the habit (sample std,
    eps 1e-4, equal-reward groups at 0); nan when no completion has it."""
    return habit_advantage(rewards, has_habit, group_size)


def _habit_cases():
    return [
        ("the first right answer of one group", [1.0, 0.0, 1.0, 0.0],
         [True, False, False, False], 4),
        ("one right and one wrong answer", [1.0, 0.0, 1.0, 0.0],
         [True, True, False, False], 4),
        ("two groups, one easy and one hard", [1.1, 1.1, 1.1, 0.1, 1.0, 0.1, 0.1, 0.1],
         [True, True, False, False, False, True, True, True], 4),
        ("a group with equal rewards", [1.1, 1.1, 1.1, 1.1, 0.1, 1.1, 0.1, 0.1],
         [True, True, True, False, True, False, False, False], 4),
        ("groups of two", [1.0, 0.0, 0.0, 1.0, 0.5, 0.5],
         [True, False, True, False, True, False], 2),
        ("no completion has the habit", [1.0, 0.0, 1.0, 0.0],
         [False, False, False, False], 4),
    ]


def check_habit_advantage(fn) -> bool:
    """Check ``fn(rewards: list, has_habit: list, group_size: int) -> float``: the
    mean advantage of the completions that show a habit."""
    for name, rewards, habit, G in _habit_cases():
        expected = reference_habit_advantage(rewards, habit, G)
        got = fn(list(rewards), list(habit), G)
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise AssertionError(f"{name}: expected a number, got {got!r}.") from None
        if math.isnan(expected):
            if math.isnan(got):
                continue
            raise AssertionError(f"{name}: expected nan (no completion to average), "
                                 f"got {got}.")
        if math.isclose(got, expected, rel_tol=1e-4, abs_tol=1e-6):
            continue
        r = torch.tensor(rewards)
        mask = torch.tensor(habit)
        batch = ((r - r.mean()) / (r.std() + 1e-4))[mask].mean().item()
        population = group_advantages(rewards, G, std="population")[mask].mean().item()
        everyone = group_advantages(rewards, G).mean().item()
        hint = ""
        if math.isclose(got, batch, rel_tol=1e-4, abs_tol=1e-6):
            hint = (" You normalised over the whole batch: the baseline and the scale "
                    "are each group's own.")
        elif math.isclose(got, population, rel_tol=1e-4, abs_tol=1e-6):
            hint = " That is the population std; GRPO (and TRL) divide by G - 1."
        elif math.isclose(got, everyone, rel_tol=1e-4, abs_tol=1e-6):
            hint = (" You averaged every completion's advantage (always about 0); "
                    "average only those with the habit.")
        raise AssertionError(f"{name}: expected {expected:.4f}, got {got:.4f}.{hint}")
    print("check_habit_advantage: per-group advantages, averaged over the habit.")
    return True
