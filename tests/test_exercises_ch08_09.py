"""Chapter 8 and 9 checkers: they accept the solutions of book/solutions/ch08.md and
ch09.md, reject typical mistakes with a message that says what is wrong, and the
reference values they are built on match closed forms computed by hand."""
import math

import pytest
import numpy as np
import torch

from grpo_lib.exercises.ch08 import (_pooled_gap, check_aggregate, check_group_push,
                                     check_length_gap_in_group, reference_group_push)
from grpo_lib.exercises.ch09 import (check_informative_groups, check_zero_std_frac,
                                     reference_informative_groups,
                                     reference_zero_std_frac)


# ---------------------------------------------------------------- solutions (ch08.md)
def solution_aggregate(per_token_loss, mask, loss_type, max_completion_length):
    masked = per_token_loss * mask  # [B, T]
    if loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    if loss_type == "bnpo":
        return masked.sum() / mask.sum().clamp(min=1)
    if loss_type == "dr_grpo":
        return masked.sum() / (per_token_loss.size(0) * max_completion_length)
    raise ValueError(loss_type)


def solution_group_push(num_right, group_size, scale):
    G, p = group_size, num_right / group_size
    if num_right in (0, group_size):
        return 0.0
    total = 2 * G * p * (1 - p)  # sum |r_i - mean|
    if scale == "none":
        return total
    std = math.sqrt(G / (G - 1) * p * (1 - p))  # sample std of the 0/1 rewards
    return total / (std + 1e-4)


def solution_length_gap_in_group(lengths, correct, group_size):
    lens = lengths.float().view(-1, group_size)  # [P, G]
    ok = torch.tensor(correct).view(-1, group_size)  # [P, G]
    gaps = [(row[~k].mean() - row[k].mean()).item()
            for row, k in zip(lens, ok) if k.any() and not k.all()]
    return sum(gaps) / len(gaps) if gaps else float("nan")


# ---------------------------------------------------------------- solutions (ch09.md)
def solution_zero_std_frac(rewards, group_size):
    grouped = torch.tensor(rewards).view(-1, group_size)  # [groups, G]
    return (grouped == grouped[:, :1]).all(dim=1).float().mean().item()


def solution_informative_groups(rewards, group_size):
    grouped = torch.tensor(rewards).view(-1, group_size)  # [groups, G]
    return (grouped != grouped[:, :1]).any(dim=1).nonzero().flatten().tolist()


def test_checkers_accept_the_solutions(capsys):
    assert check_aggregate(solution_aggregate) is True
    assert check_group_push(solution_group_push) is True
    assert check_length_gap_in_group(solution_length_gap_in_group) is True
    assert check_zero_std_frac(solution_zero_std_frac) is True
    assert check_informative_groups(solution_informative_groups) is True
    out = capsys.readouterr().out
    assert "check_aggregate: grpo, bnpo and dr_grpo agree" in out
    assert "check_informative_groups: keeps exactly" in out


def test_group_push_known_values():
    # G = 8, k = 4: advantages +-0.5 without the std -> sum 4.0
    assert reference_group_push(4, 8, "none") == pytest.approx(4.0)
    # with the sample std sqrt(8/7 * 0.25) = 0.534522..., sum = 4 / (0.534522 + 1e-4)
    assert reference_group_push(4, 8, "group") == pytest.approx(4 / (0.5345225 + 1e-4),
                                                                rel=1e-6)
    assert reference_group_push(0, 8, "group") == 0.0
    assert reference_group_push(8, 8, "none") == 0.0


def test_zero_std_known_values():
    rewards = [1.1, 1.1, 1.1, 1.1, 0.1, 1.1, 1.0, 0.1]
    assert reference_zero_std_frac(rewards, 4) == 0.5
    assert reference_informative_groups(rewards, 4) == [1]
    assert reference_zero_std_frac([0.0, 0.0, 1.0, 1.0, 0.5, 0.5], 2) == 1.0
    assert reference_informative_groups([0.0, 0.0, 1.0, 1.0, 0.5, 0.5], 2) == []


def test_aggregate_rejects_unmasked_grpo():
    def no_mask(x, mask, loss_type, L):
        if loss_type == "grpo":
            return x.mean(-1).mean()  # averages the padding too
        return solution_aggregate(x, mask, loss_type, L)

    with pytest.raises(AssertionError, match="loss_type='grpo'.*expected 2.000000"):
        check_aggregate(no_mask)


def test_aggregate_rejects_dr_grpo_by_tokens():
    def wrong(x, mask, loss_type, L):
        if loss_type == "dr_grpo":
            return (x * mask).sum() / mask.sum()  # that is bnpo
        return solution_aggregate(x, mask, loss_type, L)

    with pytest.raises(AssertionError, match="constant B \\* L_max"):
        check_aggregate(wrong)


def test_group_push_names_the_population_std():
    def population(k, G, scale):
        p = k / G
        if k in (0, G) or scale == "none":
            return 2 * G * p * (1 - p)
        return 2 * G * p * (1 - p) / (math.sqrt(p * (1 - p)) + 1e-4)

    with pytest.raises(AssertionError, match="population std"):
        check_group_push(population)


def test_zero_std_names_the_transposed_reshape():
    def transposed(rewards, G):
        grouped = torch.tensor(rewards).view(G, -1)
        return (grouped == grouped[:, :1]).all(1).float().mean().item()

    with pytest.raises(AssertionError, match="Groups are contiguous"):
        check_zero_std_frac(transposed)


def test_informative_groups_rejects_completion_indices():
    def completion_indices(rewards, G):
        keep = solution_informative_groups(rewards, G)
        return [g * G + j for g in keep for j in range(G)]

    with pytest.raises(AssertionError, match="group indices"):
        check_informative_groups(completion_indices)


def test_informative_groups_rejects_the_dead_groups():
    def dead(rewards, G):
        grouped = torch.tensor(rewards).view(-1, G)
        return (grouped == grouped[:, :1]).all(1).nonzero().flatten().tolist()

    with pytest.raises(AssertionError, match="dead groups"):
        check_informative_groups(dead)


@pytest.mark.parametrize("as_array", [np.array, torch.tensor])
def test_informative_groups_hints_bools_returned_as_an_array(as_array):
    def mask(rewards, G):  # one bool per group, as an array: a hint, not a crash
        grouped = np.array(rewards).reshape(-1, G)
        return as_array(grouped.std(1) > 0)

    with pytest.raises(AssertionError, match="expected"):
        check_informative_groups(mask)


def test_length_gap_checker_names_the_pooled_gap_and_the_sign():
    with pytest.raises(AssertionError, match="pooled gap over the whole batch"):
        check_length_gap_in_group(lambda lengths, correct, G: _pooled_gap(lengths, correct))
    with pytest.raises(AssertionError, match="sign is flipped"):
        check_length_gap_in_group(
            lambda lengths, correct, G: -solution_length_gap_in_group(lengths, correct, G))
    with pytest.raises(AssertionError, match="expected NaN"):
        check_length_gap_in_group(
            lambda lengths, correct, G: (solution_length_gap_in_group(lengths, correct, G)
                                         if not all(correct) else 0.0))
