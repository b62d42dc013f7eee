"""The policy gradient on a policy small enough to differentiate exactly (chapter 2).

A categorical policy over ``K`` actions,
:math:`\\pi_\\theta = \\mathrm{softmax}(\\theta)`, with a fixed reward per action.
Its expected reward :math:`J(\\theta) = \\sum_a \\pi_\\theta(a)\\, r(a)` has an
exact gradient, so every estimator a trainer uses (from samples, with a baseline,
from another policy's samples) can be checked against it. A language model is the
same policy with one softmax per token.
"""

from __future__ import annotations

import torch


def expected_reward(logits: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """:math:`J(\\theta) = \\sum_a \\pi_\\theta(a)\\, r(a)`.

    ``logits, rewards``: ``[K]``."""
    return (torch.softmax(logits, -1) * rewards).sum()


def exact_gradient(logits: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """:math:`\\nabla_\\theta J`, by autograd through the sum over all actions.

    Returns ``[K]``."""
    theta = logits.detach().clone().requires_grad_()
    (grad,) = torch.autograd.grad(expected_reward(theta, rewards), theta)
    return grad


def grad_log_prob(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """The score :math:`\\nabla_\\theta \\log\\pi_\\theta(a)` of a softmax policy.

    .. math:: \\nabla_\\theta \\log \\mathrm{softmax}(\\theta)_a = e_a - \\pi_\\theta

    ``actions``: ``[N]`` indices; returns ``[N, K]``, one score per sample.
    """
    probs = torch.softmax(logits.detach(), -1)  # [K]
    onehot = torch.nn.functional.one_hot(actions, logits.numel()).to(probs.dtype)
    return onehot - probs  # [N, K]


def score_function_gradient(
    logits: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
    baseline: float | torch.Tensor = 0.0, weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """REINFORCE's estimate of :math:`\\nabla_\\theta J` from ``N`` sampled actions
    (Williams 1992), one row per sample.

    .. math:: g_n = w_n\\,\\big(r(a_n) - b\\big)\\,
              \\nabla_\\theta \\log\\pi_\\theta(a_n)

    The mean of the rows estimates the gradient. ``baseline``: :math:`b`, a number or
    ``[N]`` (one per sample, e.g. the mean of its group). ``weights``: :math:`w_n`,
    ``[N]`` importance weights
    :math:`\\pi_\\theta(a_n) / \\pi_{\\mathrm{old}}(a_n)` when the actions were
    drawn from another policy :math:`\\pi_{\\mathrm{old}}`; ``None`` means 1.
    Returns ``[N, K]``.
    """
    advantage = rewards[actions] - baseline  # [N]
    if weights is not None:
        advantage = weights * advantage
    return advantage[:, None] * grad_log_prob(logits, actions)  # [N, K]
