"""Chapter 11 checkers: their reference values match hand computations, and the
"lower in every seed" reference reads the committed runs the way the chapter does."""
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from grpo_lib.exercises.ch11 import (reference_language_share,
                                     reference_lower_in_every_seed,
                                     reference_normalize_then_sum)

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"


@pytest.mark.parametrize("text, expected", [
    ("First 3 * 4 = 12, then 2 + 12 = 14.", 1.0),
    ("首先 3 * 4 = 12, 然后 2 + 12 = 14.", 0.0),
    ("First 3 * 4 = 12, 然后 2 + 12 = 14.", 1 / 3),  # 1 word, 2 characters
    ("3 * 4 = 12, 2 + 12 = 14", 1.0),  # no language at all
    ("The answer is 答案是 14", 0.5),
    ("   ", 0.0),  # blank reasoning: the floor
])
def test_language_share_by_hand(text, expected):
    assert math.isclose(reference_language_share(text), expected)


def test_normalize_then_sum_by_hand():
    # one group: accuracy [1, 1, 0, 0], language [1, 0.5, 1, 1], weights 1 and 0.2
    acc_z = [math.sqrt(3) / 2] * 2 + [-math.sqrt(3) / 2] * 2  # sample std 1/sqrt(3)
    lang_z = [0.5, -1.5, 0.5, 0.5]  # mean 0.875, sample std 0.25
    s = [a + 0.2 * b for a, b in zip(acc_z, lang_z)]
    mean = sum(s) / 4
    std = math.sqrt(sum((x - mean) ** 2 for x in s) / 3)
    expected = [(x - mean) / std for x in s]
    rows = [[1, 1], [1, 0.5], [0, 1], [0, 1]]
    got = reference_normalize_then_sum(rows, [1.0, 0.2], 4)
    assert got == pytest.approx(expected, abs=2e-3)  # eps = 1e-4 in both divisions


def test_normalize_then_sum_differs_from_summing_first():
    rows = [[1, 1.0], [1, 0.9], [1, 1.0], [1, 1.0]]  # accuracy constant
    got = reference_normalize_then_sum(rows, [1.0, 0.2], 4)
    # the only varying reward decides the ranking; the batch step rescales to unit std
    assert got[1] < 0 < got[0] and torch.tensor(got).std().item() == pytest.approx(
        1.0, abs=1e-3)


def test_lower_in_every_seed_on_the_committed_runs():  # data/runs is committed
    def read(pattern):
        return {s: pd.read_csv(RUNS / pattern.format(s) / "eval.csv") for s in (0, 1)}

    base_acc = read("ch11_base_acc_seed{}_cpu")
    base_lang = read("ch11_base_lang_seed{}_cpu")
    # at the final evaluation seed 1 ties at 0: not lower in every seed
    assert reference_lower_in_every_seed(base_lang, base_acc) is False
    assert reference_lower_in_every_seed(
        {s: f[f["step"] <= 100] for s, f in base_lang.items()},
        {s: f[f["step"] <= 100] for s, f in base_acc.items()}) is True
