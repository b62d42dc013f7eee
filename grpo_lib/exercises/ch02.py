"""Checkers for chapter 2 (the objective). Solutions: book/solutions/ch02.md."""
from __future__ import annotations

import torch

from ..objective import clipped_surrogate, kl_estimate, probability_ratio


def _as_tensor(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise AssertionError(
            f"{name} should return a torch.Tensor, got {type(x).__name__}.")
    return x


def _fmt(t: torch.Tensor) -> str:
    """A tensor as a nested list rounded to 4 decimals (readable in error messages)."""
    return str(torch.round(t.detach().double(), decimals=4).tolist())


def _close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-6) -> bool:
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=atol,
                                                 rtol=0)


def check_clipped_surrogate(fn) -> bool:
    """Check ``fn(ratio [B,T], advantages [B], epsilon) -> [B,T]``, the PPO clipped
    surrogate ``min(rho A, clip(rho, 1 - epsilon, 1 + epsilon) A)`` per token."""
    row = [0.5, 0.8, 1.0, 1.1, 1.2, 1.5]
    ratio = torch.tensor([row, row])  # [2, 6]
    advantages = torch.tensor([2.0, -1.0])
    for eps in (0.2, 0.1):
        expected = clipped_surrogate(ratio, advantages, epsilon=eps)
        got = _as_tensor(fn(ratio.clone(), advantages.clone(), eps), "your function")
        if got.shape != expected.shape:
            raise AssertionError(
                f"shape: expected {tuple(expected.shape)} (one value per token), got "
                f"{tuple(got.shape)}. Broadcast advantages [B] over tokens with "
                f"advantages[:, None]."
            )
        if _close(got, expected):
            continue
        clipped = torch.clamp(ratio, 1 - eps, 1 + eps) * advantages[:, None]
        unclipped = ratio * advantages[:, None]
        hint = ""
        if _close(got, torch.maximum(unclipped, clipped)):
            hint = (" You took the max; the surrogate takes the min (a pessimistic "
                    "bound).")
        elif _close(got, clipped):
            hint = " You return only the clipped term; take the min with ratio * A."
        elif _close(got, unclipped):
            hint = " Nothing is clipped: clamp the ratio to [1 - eps, 1 + eps]."
        raise AssertionError(
            f"epsilon={eps}, ratio rows {_fmt(ratio[0])}, advantages "
            f"{_fmt(advantages)}:\n expected {_fmt(expected)}\n got      "
            f"{_fmt(got)}.{hint}"
        )
    print("check_clipped_surrogate: correct for A > 0 and A < 0 at two clip ranges.")
    return True


def check_k3(fn) -> bool:
    """Check ``fn(logp, ref_logp) -> k3`` per token (Schulman's k3, DeepSeekMath eq. 4).

    With the reference log-ratio ``delta = logp - ref_logp``
    (:math:`\\log\\pi_\\theta - \\log\\pi_{\\mathrm{ref}}`),
    :math:`k_3 = e^{-\\delta} + \\delta - 1`.
    """
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 4
    ref_logp = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 4
    expected = kl_estimate(logp, ref_logp, "k3")
    got = _as_tensor(fn(logp.clone(), ref_logp.clone()), "your function")
    if _close(got, expected, atol=1e-9):
        if (got < 0).any():
            raise AssertionError("k3 is never negative; some of your values are.")
        print("check_k3: correct (and never negative).")
        return True
    hint = ""
    if _close(got, kl_estimate(ref_logp, logp, "k3"), atol=1e-9):
        hint = (" The two policies have their roles swapped: the reference log-ratio "
                "is delta = log pi_theta - log pi_ref, and the reference ratio "
                "pi_ref / pi_theta is exp(-delta).")
    elif _close(got, kl_estimate(logp, ref_logp, "k1"), atol=1e-9):
        hint = (" That is k1 (delta itself); k3 adds a term with mean zero under "
                "pi_theta that makes every value non-negative.")
    raise AssertionError(
        f"logp={_fmt(logp[0, :3])}..., ref_logp={_fmt(ref_logp[0, :3])}...:\n"
        f" expected {_fmt(expected[0, :3])}...\n got      "
        f"{_fmt(got.flatten()[:3])}...{hint}"
    )


def _reference_objective(logp, old_logp, ref_logp, advantages, mask, epsilon,
                         beta):
    ratio = probability_ratio(logp, old_logp)  # rho, [B, T]
    per_token = (clipped_surrogate(ratio, advantages, epsilon)
                 - beta * kl_estimate(logp, ref_logp, "k3"))  # [B, T]
    return ((per_token * mask).sum(-1) / mask.sum(-1)).mean()


def check_grpo_objective(fn) -> bool:
    """Check ``fn(logp, old_logp, ref_logp, advantages, mask, epsilon, beta) -> J``.

    ``J`` is DeepSeekMath eq. 3: per token ``min(rho A, clip(rho) A) - beta k3``,
    averaged over each sequence's real tokens, then over sequences. A scalar to
    MAXIMISE.
    """
    g = torch.Generator().manual_seed(0)
    B, T = 4, 6
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    old_logp = logp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref_logp = logp + 0.5 * torch.randn(B, T, generator=g, dtype=torch.float64)
    advantages = torch.tensor([1.2, -0.4, -0.8, 0.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0],
                         [1, 0, 0, 0, 0, 0]], dtype=torch.float64)
    args = (logp, old_logp, ref_logp, advantages, mask, 0.2, 0.04)
    expected = _reference_objective(*args)
    got = fn(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
    got = torch.as_tensor(got, dtype=torch.float64)
    if got.numel() != 1:
        raise AssertionError(
            f"expected one number (a scalar tensor), got shape {tuple(got.shape)}: "
            f"average over tokens, then sequences.")
    if abs(got.item() - expected.item()) < 1e-8:
        print(f"check_grpo_objective: correct, J = {expected.item():.6f}.")
        return True
    hint = ""
    if abs(got.item() + expected.item()) < 1e-8:
        hint = " The sign is flipped: J is maximised; the loss is -J."
    else:
        ratio = probability_ratio(logp, old_logp)
        per_token = clipped_surrogate(ratio, advantages, 0.2) - 0.04 * kl_estimate(
            logp, ref_logp, "k3")
        token_mean = (per_token * mask).sum() / mask.sum()
        if abs(got.item() - token_mean.item()) < 1e-8:
            hint = (" You averaged over all tokens of the batch (that is BNPO/DAPO); "
                    "GRPO averages within each sequence first, then over sequences.")
        elif abs(got.item() - per_token.mean(-1).mean().item()) < 1e-8:
            hint = " You averaged over padding too: weight tokens by the mask."
        elif abs(got.item() - _reference_objective(*args[:-1], -0.04).item()) < 1e-8:
            hint = (" The KL term is subtracted from the objective (beta * k3 with a "
                    "minus).")
    raise AssertionError(
        f"expected J = {expected.item():.6f}, got {got.item():.6f}.{hint}")


def check_reinforce_gradient(fn) -> bool:
    """Check ``fn(logits [K], actions [N], rewards [K], baseline) -> [K]``: REINFORCE's
    estimate of the gradient of a softmax policy's expected reward, the mean over the
    samples of ``(r(a_n) - b) * grad log softmax(logits)[a_n]``."""
    from ..policy_gradient import score_function_gradient

    logits = torch.tensor([0.5, -1.0, 0.0, 1.0], dtype=torch.float64)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.5], dtype=torch.float64)
    actions = torch.tensor([0, 3, 3, 2, 0, 1, 3, 0])
    for b in (0.0, 0.5):
        expected = score_function_gradient(logits, actions, rewards, b).mean(0)
        got = _as_tensor(fn(logits.clone(), actions.clone(), rewards.clone(), b),
                         "your function")
        if _close(got, expected, atol=1e-9):
            continue
        got = got.detach().double()
        onehot = torch.nn.functional.one_hot(actions, 4).double()  # [N, K]
        adv = (rewards[actions] - b)[:, None]  # [N, 1]
        hint = ""
        if got.shape != expected.shape:
            hint = (f" Return one number per logit, shape {tuple(expected.shape)}: "
                    f"average the per-sample estimates over the samples.")
        elif _close(got, -expected):
            hint = " The sign is flipped: this is the gradient of J, to go uphill."
        elif b and _close(got, score_function_gradient(logits, actions, rewards)
                          .mean(0)):
            hint = " You ignored the baseline: subtract b from every reward."
        elif _close(got, (adv * onehot).mean(0)):
            hint = (" You used e_a as the score; the score of a softmax is "
                    "e_a - softmax(logits).")
        elif _close(got, score_function_gradient(logits, actions, rewards, b).sum(0)):
            hint = " You summed over the samples; average them."
        raise AssertionError(
            f"baseline {b}, actions {actions.tolist()}:\n expected {_fmt(expected)}\n"
            f" got      {_fmt(got)}.{hint}")
    print("check_reinforce_gradient: correct, with and without a baseline.")
    return True
