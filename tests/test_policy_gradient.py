"""grpo_lib.policy_gradient: the score-function estimator against the exact gradient."""

from __future__ import annotations

import torch

from grpo_lib.policy_gradient import (exact_gradient, expected_reward, grad_log_prob,
                                      score_function_gradient)

LOGITS = torch.tensor([0.5, -1.0, 0.0, 1.0], dtype=torch.float64)
REWARDS = torch.tensor([1.0, 0.0, 0.0, 0.5], dtype=torch.float64)
N = 200_000


def _draw(logits, n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.multinomial(torch.softmax(logits, -1), n, replacement=True,
                             generator=gen)


def test_exact_gradient_by_hand():
    # dJ/dtheta_k = pi_k (r_k - J) for a softmax policy
    pi = torch.softmax(LOGITS, -1)
    J = expected_reward(LOGITS, REWARDS)
    torch.testing.assert_close(exact_gradient(LOGITS, REWARDS), pi * (REWARDS - J))


def test_grad_log_prob_matches_autograd():
    theta = LOGITS.clone().requires_grad_()
    for a in range(4):
        (g,) = torch.autograd.grad(torch.log_softmax(theta, -1)[a], theta)
        torch.testing.assert_close(grad_log_prob(LOGITS, torch.tensor([a]))[0], g)


def test_estimate_is_unbiased_with_and_without_a_baseline():
    exact = exact_gradient(LOGITS, REWARDS)
    actions = _draw(LOGITS, N)
    for b in (0.0, 0.5, 10.0):
        g = score_function_gradient(LOGITS, actions, REWARDS, baseline=b)
        stderr = g.std(0) / N ** 0.5
        assert ((g.mean(0) - exact).abs() < 5 * stderr + 1e-9).all(), b


def test_the_mean_reward_baseline_lowers_the_variance():
    actions = _draw(LOGITS, N)
    J = expected_reward(LOGITS, REWARDS).item()
    var = {b: score_function_gradient(LOGITS, actions, REWARDS, baseline=b)
           .var(0).sum().item() for b in (0.0, J, 10.0)}
    assert var[J] < var[0.0] < var[10.0]


def test_importance_weights_correct_samples_from_another_policy():
    old = torch.zeros(4, dtype=torch.float64)  # uniform sampling policy
    actions = _draw(old, N, seed=1)
    w = (torch.softmax(LOGITS, -1) / torch.softmax(old, -1))[actions]  # [N]
    exact = exact_gradient(LOGITS, REWARDS)
    weighted = score_function_gradient(LOGITS, actions, REWARDS, weights=w)
    plain = score_function_gradient(LOGITS, actions, REWARDS)
    stderr = weighted.std(0) / N ** 0.5
    assert ((weighted.mean(0) - exact).abs() < 5 * stderr).all()
    assert (plain.mean(0) - exact).abs().max() > 20 * stderr.max()  # biased without w
