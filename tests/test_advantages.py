"""Tests for grpo_lib.advantages: known values, conventions, edge cases, TRL parity."""
import math

import numpy as np
import pytest
import torch

from grpo_lib.advantages import group_advantages, group_stats, habit_advantage

SEED_REWARDS = [0.1, 1.1, 1.0, 0.1]  # seed 001's o1..o4 for "What is 2 + 3 * 4?"


def test_seed_group_stats_population_and_sample():
    mean, pop = group_stats(SEED_REWARDS, 4, std="population")
    _, sample = group_stats(SEED_REWARDS, 4, std="sample")
    assert mean.item() == pytest.approx(0.575, abs=1e-6)
    # sum of squared deviations = 0.9075 -> sqrt(0.9075/4), sqrt(0.9075/3)
    assert pop.item() == pytest.approx(math.sqrt(0.9075 / 4), abs=1e-6)
    assert pop.item() == pytest.approx(0.4763, abs=1e-4)
    assert sample.item() == pytest.approx(0.5500, abs=1e-4)
    assert sample.item() / pop.item() == pytest.approx(math.sqrt(4 / 3), rel=1e-6)


def test_seed_advantages_both_conventions():
    pop = group_advantages(SEED_REWARDS, 4, std="population")
    sample = group_advantages(SEED_REWARDS, 4, std="sample")
    r = np.array(SEED_REWARDS)
    expected_pop = (r - r.mean()) / (r.std() + 1e-4)
    expected_sample = (r - r.mean()) / (r.std(ddof=1) + 1e-4)
    np.testing.assert_allclose(pop.numpy(), expected_pop, atol=1e-6)
    np.testing.assert_allclose(sample.numpy(), expected_sample, atol=1e-6)
    np.testing.assert_allclose(pop.numpy(), [-0.9970, 1.1020, 0.8921, -0.9970], atol=1e-4)
    np.testing.assert_allclose(sample.numpy(), [-0.8635, 0.9544, 0.7726, -0.8635], atol=1e-4)
    assert pop.sum().item() == pytest.approx(0.0, abs=1e-6)


def test_scale_none_is_mean_centring():
    adv = group_advantages(SEED_REWARDS, 4, scale="none")
    np.testing.assert_allclose(adv.numpy(), [-0.475, 0.525, 0.425, -0.475], atol=1e-6)


def test_groups_are_contiguous_and_independent():
    rewards = [0.0, 1.0, 10.0, 30.0]  # two groups of 2
    adv = group_advantages(rewards, 2, scale="none")
    np.testing.assert_allclose(adv.numpy(), [-0.5, 0.5, -10.0, 10.0], atol=1e-6)
    adv = group_advantages(rewards, 2, scale="group", eps=0.0)
    # each group of two, sample std = |a - b| / sqrt(2) -> advantages -+1/sqrt(2)
    np.testing.assert_allclose(adv.numpy(), [-(0.5 ** 0.5), 0.5 ** 0.5] * 2, atol=1e-6)


def test_batch_scale_uses_batch_std():
    rewards = [0.0, 1.0, 10.0, 30.0]
    adv = group_advantages(rewards, 2, scale="batch", eps=0.0)
    batch_std = np.std(rewards, ddof=1)
    np.testing.assert_allclose(adv.numpy(), np.array([-0.5, 0.5, -10, 10]) / batch_std,
                               atol=1e-6)


def test_all_equal_rewards_give_exact_zeros():
    for scale in ("group", "batch", "none"):
        adv = group_advantages([0.3] * 8, 4, scale=scale)
        assert torch.equal(adv, torch.zeros(8)), scale
    adv = group_advantages([1.0, 1.0, 0.0, 1.0], 2)
    assert adv[:2].tolist() == [0.0, 0.0]
    assert adv[2].item() < 0 < adv[3].item()


def test_eps_bounds_tiny_differences():
    adv = group_advantages([0.0, 1e-6], 2, eps=1e-4)
    assert abs(adv[1].item()) < 0.01  # the eps dominates a std of 7e-7
    adv0 = group_advantages([0.0, 1e-6], 2, eps=0.0)
    assert adv0[1].item() == pytest.approx(0.5 ** 0.5, rel=1e-3)


def test_input_types_and_dtype():
    t = torch.tensor(SEED_REWARDS, dtype=torch.float64)
    assert group_advantages(t, 4).dtype == torch.float64
    assert group_advantages(np.array(SEED_REWARDS), 4).dtype == torch.float32
    ints = group_advantages(torch.tensor([0, 1, 1, 0]), 2, scale="none")
    np.testing.assert_allclose(ints.numpy(), [-0.5, 0.5, 0.5, -0.5])


def test_group_of_one_is_a_clear_error():
    with pytest.raises(ValueError, match="group of size 1 has no baseline"):
        group_advantages([1.0, 0.0], 1)


@pytest.mark.parametrize(
    "rewards, G, match",
    [
        ([1.0, 0.0, 1.0], 2, "cannot be split into groups of 2"),
        ([], 2, "empty"),
        ([0.0, float("nan"), 1.0, 0.0], 2, r"positions \{1: nan\}"),
        ([0.0, 1.0, float("inf"), 0.0], 2, r"positions \{2: inf\}"),
    ],
)
def test_bad_inputs(rewards, G, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards, G)


def test_bad_option_names():
    with pytest.raises(ValueError, match="scale='grop'"):
        group_advantages(SEED_REWARDS, 4, scale="grop")
    with pytest.raises(ValueError, match="std='unbiased'"):
        group_advantages(SEED_REWARDS, 4, std="unbiased")
    with pytest.raises(ValueError, match="1-D"):
        group_advantages([[0.0, 1.0]], 2)


def test_parity_with_trl_group_normalisation():
    """TRL's GRPOTrainer: (r - group mean) / (nanstd(group) + 1e-4), trl/trainer/utils.py."""
    from trl.trainer.utils import nanstd

    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(24, generator=g)
    G = 6
    mean = rewards.view(-1, G).mean(dim=1).repeat_interleave(G)
    std = nanstd(rewards.view(-1, G), dim=1).repeat_interleave(G)
    trl_adv = (rewards - mean) / (std + 1e-4)
    torch.testing.assert_close(group_advantages(rewards, G), trl_adv, atol=1e-6, rtol=1e-6)
    trl_batch = (rewards - mean) / (nanstd(rewards) + 1e-4)
    torch.testing.assert_close(group_advantages(rewards, G, scale="batch"), trl_batch,
                               atol=1e-6, rtol=1e-6)


def test_decoupled_advantages_normalise_each_reward_then_the_sum():
    import numpy as np

    from grpo_lib.advantages import decoupled_advantages

    # two groups of G = 4; column 0 accuracy (0/1), column 1 a language reward (0/1)
    r = np.array([[1, 1], [1, 0], [0, 1], [0, 0],
                  [1, 1], [1, 1], [1, 0], [1, 1]], dtype=float)
    w = [1.0, 0.2]
    got = decoupled_advantages(r, w, group_size=4)
    g = r.reshape(2, 4, 2)
    z = (g - g.mean(1, keepdims=True)) / (g.std(1, ddof=1, keepdims=True) + 1e-4)
    z[1, :, 0] = 0.0  # group 2's accuracy never varies: exactly 0, not 0/eps
    s = (z * np.array(w)).sum(-1).reshape(-1)
    want = (s - s.mean()) / (s.std(ddof=1) + 1e-4)
    assert np.allclose(got.numpy(), want, atol=1e-5)
    # summing first would let accuracy drown the language reward in group 1: the
    # completion with both rewards beats the one with accuracy only by 0.2 of a unit
    # there, but after normalising each reward the language reward counts as much
    assert got[0] > got[1] and got[2] > got[3]
    assert abs(float(got.sum())) < 1e-5


def test_decoupled_advantages_zero_for_a_flat_group_and_clear_errors():
    import pytest

    from grpo_lib.advantages import decoupled_advantages

    r = [[1.0, 0.5]] * 4 + [[0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]]
    got = decoupled_advantages(r, [1.0, 0.2], group_size=4)
    assert got[:4].tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="one weight per reward"):
        decoupled_advantages(r, [1.0], group_size=4)
    with pytest.raises(ValueError, match=r"\[B, K\]"):
        decoupled_advantages([1.0, 0.0], [1.0], group_size=2)


def test_habit_advantage_by_hand():
    # Group 1: rewards 1, 0, 1, 0 -> mean 0.5, sample std sqrt(1/3), A = +-0.866;
    # group 2 has equal rewards -> A = 0. The habit shows in completions 0, 1 and 4.
    rewards = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    habit = [True, True, False, False, True, False, False, False]
    a = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    assert habit_advantage(rewards, habit, 4) == pytest.approx((a - a + 0.0) / 3)
    # Only the right answer of group 1 has the habit: the habit is pushed up.
    assert habit_advantage(rewards, [True] + [False] * 7, 4) == pytest.approx(a)
    assert habit_advantage(rewards, [False, True] + [False] * 6, 4) == pytest.approx(-a)
    # Dr. GRPO's scale: A = r - mean.
    assert habit_advantage(rewards, [True] + [False] * 7, 4, scale="none") == 0.5


def test_habit_advantage_no_habit_and_bad_input():
    assert math.isnan(habit_advantage([1.0, 0.0], [False, False], 2))
    with pytest.raises(ValueError, match="one flag per completion"):
        habit_advantage([1.0, 0.0, 1.0, 0.0], [True, False], 2)
