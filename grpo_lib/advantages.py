"""Group-relative advantages: GRPO's replacement for a learned critic.

For one prompt the policy samples a *group* of ``G`` outputs ``o_1 .. o_G`` and a rule
scores them ``r_1 .. r_G``. With outcome supervision every token of output ``i`` gets
the same advantage (DeepSeekMath, Shao et al. 2024, section 4.1.2):

.. math::

    \\hat A_{i,t} = \\tilde r_i = \\frac{r_i - \\operatorname{mean}(r_1..r_G)}
                                   {\\operatorname{std}(r_1..r_G)}

The group mean is the baseline (what this prompt earns on average); dividing by the std
puts easy and hard prompts on one scale. Conventions differ in three places, all knobs
here:

* ``scale`` — ``"group"`` divides by the group's std (DeepSeekMath, TRL's default);
  ``"batch"`` keeps the group mean but divides by the std of the whole batch (TRL
  ``scale_rewards="batch"``); ``"none"`` does not divide at all (Dr. GRPO,
  Liu et al. 2025, which argues the std division biases toward too-easy and too-hard
  prompts).
* ``std`` — ``"sample"`` is the Bessel-corrected std (divide by ``G - 1``), TRL's;
  ``"population"`` divides by ``G`` (``numpy.std``), what the GRPO-Zero code uses. For
  G = 4 the two differ by a factor ``sqrt(4/3) = 1.1547``.
* ``eps`` — :math:`\\epsilon_{\\mathrm{std}}`, added to the std (TRL and GRPO-Zero both
  use ``1e-4``) so that a group whose rewards are all equal gets advantages of exactly 0
  instead of 0/0.

Groups are contiguous: a batch of ``B = num_prompts * G`` rewards is ordered
``[p0]*G + [p1]*G + ...`` (see ARCHITECTURE.md).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

SCALES = ("group", "batch", "none")
STDS = ("sample", "population")


def _as_reward_tensor(
        rewards: Sequence[float] | np.ndarray | torch.Tensor) -> torch.Tensor:
    """Turn a list / array / tensor of rewards into a 1-D floating tensor, checking
    values."""
    if isinstance(rewards, torch.Tensor):
        r = rewards.detach()
        if not torch.is_floating_point(r):
            r = r.to(torch.get_default_dtype())
    else:
        try:
            r = torch.as_tensor(np.asarray(rewards, dtype=np.float64))
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"rewards must be a list, numpy array or tensor of numbers; could not "
                f"convert {type(rewards).__name__} ({err}). Pass e.g. "
                f"[0.1, 1.1, 1.0, 0.1]."
            ) from None
        r = r.to(torch.get_default_dtype())
    if r.ndim != 1:
        raise ValueError(
            f"rewards must be 1-D (one reward per completion, groups contiguous), got "
            f"shape {tuple(r.shape)}. Flatten it first: rewards.reshape(-1)."
        )
    if r.numel() == 0:
        raise ValueError("rewards is empty: there is nothing to normalise. Pass at "
                         "least one group of G >= 2 rewards.")
    bad = (~torch.isfinite(r)).nonzero().flatten().tolist()
    if bad:
        shown = ", ".join(f"{i}: {r[i].item()}" for i in bad[:10])
        more = f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""
        raise ValueError(
            f"rewards contain NaN or infinite values at positions {{{shown}}}{more}. "
            f"A reward function must return a finite number for every completion "
            f"(0.0 for a malformed one); fix or filter those completions first."
        )
    return r


def _check_group_size(n: int, group_size: int) -> None:
    if not isinstance(group_size, (int, np.integer)) or isinstance(group_size, bool):
        raise TypeError(f"group_size must be an int, got {group_size!r}.")
    if group_size < 2:
        raise ValueError(
            f"group_size={group_size}: a group of size 1 has no baseline (its mean is "
            f"its own reward, so every advantage would be 0 and nothing would be "
            f"learned). GRPO needs G >= 2 completions per prompt; use "
            f"num_generations >= 2 (the papers use 4-64)."
        )
    if n % group_size != 0:
        raise ValueError(
            f"{n} rewards cannot be split into groups of {group_size} "
            f"({n} % {group_size} = {n % group_size}). Pass num_prompts * G rewards, "
            f"each prompt's G completions contiguous."
        )


def _std(x: torch.Tensor, std: str, dim: int | None = None) -> torch.Tensor:
    if std not in STDS:
        raise ValueError(f"std={std!r} is not one of {STDS}: 'sample' divides by G - 1 "
                         f"(TRL), 'population' by G (numpy.std, GRPO-Zero).")
    correction = 1 if std == "sample" else 0
    if dim is None:
        return x.std(correction=correction)
    return x.std(dim=dim, correction=correction, keepdim=True)


def group_stats(
    rewards: Sequence[float] | np.ndarray | torch.Tensor,
    group_size: int,
    std: str = "sample",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group mean and standard deviation of the rewards (for display and logging).

    .. math::

        \\bar r_g = \\frac1G \\sum_{i \\in g} r_i, \\qquad
        \\sigma_{r,g} = \\sqrt{\\frac{1}{G - c} \\sum_{i \\in g} (r_i - \\bar r_g)^2}

    with ``c = 1`` for ``std="sample"`` and ``c = 0`` for ``std="population"``.

    Returns ``(mean, std)``, each of shape ``[num_groups]``.
    """
    r = _as_reward_tensor(rewards)  # [B]
    _check_group_size(r.numel(), group_size)
    grouped = r.view(-1, group_size)  # [num_groups, G]
    return grouped.mean(dim=1), _std(grouped, std, dim=1).squeeze(1)


def group_advantages(
    rewards: Sequence[float] | np.ndarray | torch.Tensor,
    group_size: int,
    scale: str = "group",
    std: str = "sample",
    eps: float = 1e-4,
) -> torch.Tensor:
    """Group-relative advantages, one per completion (DeepSeekMath, outcome
    supervision).

    .. math::

        \\hat A_i = \\frac{r_i - \\bar r_g}{\\sigma_{r,g} + \\epsilon_{\\mathrm{std}}}

    where ``g`` is the group of completion ``i``, :math:`\\bar r_g` and
    :math:`\\sigma_{r,g}` its mean and std (``scale="group"``); with ``scale="batch"``
    the denominator is the std of all ``B`` rewards; with ``scale="none"`` there is no
    denominator (Dr. GRPO): ``A_i = r_i - mean(r_g)``.

    Args:
        rewards: ``B`` rewards (list, numpy array or tensor), ``B % group_size == 0``,
            each prompt's ``G`` completions contiguous.
        group_size: ``G``, completions per prompt (TRL's ``num_generations``), >= 2.
        scale: ``"group"`` | ``"batch"`` | ``"none"`` (TRL's ``scale_rewards``).
        std: ``"sample"`` (over G - 1, TRL) | ``"population"`` (``numpy.std``,
            GRPO-Zero).
        eps: :math:`\\epsilon_{\\mathrm{std}}`, added to the std so that equal rewards
            give 0, not 0/0.

    Returns:
        ``[B]`` tensor of advantages (float; same dtype/device as a float tensor
        input).
        A group whose rewards are all equal gets advantages of exactly 0.

    Example (chapter 1's group for "What is 2 + 3 * 4?"):
        >>> group_advantages([0.1, 1.1, 1.0, 0.1], 4, std="population")
        tensor([-0.9970,  1.1020,  0.8921, -0.9970])
    """
    if scale not in SCALES:
        raise ValueError(
            f"scale={scale!r} is not one of {SCALES}: 'group' divides by each group's "
            f"std (GRPO), 'batch' by the whole batch's std, 'none' does not divide "
            f"(Dr. GRPO)."
        )
    if std not in STDS:
        raise ValueError(f"std={std!r} is not one of {STDS}: 'sample' divides by G - 1 "
                         f"(TRL), 'population' by G (numpy.std, GRPO-Zero).")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}; the usual value is 1e-4.")
    r = _as_reward_tensor(rewards)  # [B]
    _check_group_size(r.numel(), group_size)
    grouped = r.view(-1, group_size)  # [num_groups, G]
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # [num_groups, G]
    if scale == "group":
        advantages = centred / (_std(grouped, std, dim=1) + eps)  # [num_groups, G]
    elif scale == "batch":
        batch_std = _std(r, std) if r.numel() > 1 else torch.zeros((), dtype=r.dtype)
        advantages = centred / (batch_std + eps)
    else:
        advantages = centred
    # Equal rewards: centred is 0 only up to rounding of the mean; make it exact.
    equal = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)  # [num_groups, 1]
    advantages = advantages.masked_fill(equal, 0.0)
    return advantages.reshape(-1)  # [B]


def decoupled_advantages(
    rewards_per_func: np.ndarray | torch.Tensor,
    weights: Sequence[float],
    group_size: int,
    eps: float = 1e-4,
) -> torch.Tensor:
    """Advantages from several rewards normalised one by one (GDPO; TRL's
    ``multi_objective_aggregation="normalize_then_sum"``).

    .. math::

        s_i = \\sum_k w_k \\frac{r_{i,k} - \\bar r_{g,k}}{\\sigma_{r,g,k}
        + \\epsilon_{\\mathrm{std}}}, \\qquad
        \\hat A_i = \\frac{s_i - \\bar s}{\\sigma_s + \\epsilon_{\\mathrm{std}}}

    Each reward ``k`` is standardised inside each group first, then the weighted sum
    is standardised over the whole batch. Summing first (GRPO's default) lets the
    reward with the largest spread in a group decide the ranking; normalising first
    gives every reward the same say wherever it varies, so a small-scale reward
    (a 0.2-weighted language reward, say) is not drowned by accuracy. Each group's
    standardised rewards sum to 0, so :math:`\\bar s = 0` and the batch step only
    rescales.

    Args:
        rewards_per_func: ``[B, K]`` rewards, one column per reward function; each
            prompt's ``G`` completions contiguous.
        weights: ``K`` weights :math:`w_k`.
        group_size: ``G``, >= 2.
    Returns:
        ``[B]`` advantages. A group where no reward varies gets exactly 0.
    """
    r = torch.as_tensor(rewards_per_func, dtype=torch.float32)
    if r.dim() != 2:
        raise ValueError(f"rewards_per_func must be [B, K] (one column per reward), "
                         f"got shape {tuple(r.shape)}")
    if len(weights) != r.shape[1]:
        raise ValueError(f"{len(weights)} weights for {r.shape[1]} reward columns; "
                         f"give one weight per reward function")
    _check_group_size(r.shape[0], group_size)
    grouped = r.view(-1, group_size, r.shape[1])  # [num_groups, G, K]
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # [num_groups, G, K]
    per_reward = centred / (grouped.std(dim=1, keepdim=True) + eps)
    equal = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)  # [num_groups, 1, K]
    per_reward = per_reward.masked_fill(equal, 0.0)
    w = torch.as_tensor(weights, dtype=r.dtype)  # [K]
    summed = (per_reward * w).sum(dim=-1).reshape(-1)  # [B]
    advantages = (summed - summed.mean()) / (summed.std() + eps)  # [B]
    flat = equal.all(dim=-1).expand(-1, group_size).reshape(-1)  # [B]
    return advantages.masked_fill(flat, 0.0)


def habit_advantage(
    rewards: Sequence[float] | np.ndarray | torch.Tensor,
    has_habit: Sequence[bool] | np.ndarray | torch.Tensor,
    group_size: int,
    scale: str = "group",
) -> float:
    r"""Mean group-relative advantage of the completions that show a habit.

    .. math::

        \bar A_{\mathcal H} = \frac{1}{|\mathcal H|} \sum_{i \in \mathcal H} \hat A_i

    where :math:`\hat A_i` is :func:`group_advantages` and :math:`\mathcal H` the
    completions with the habit (a Chinese character, a self-correction, a long answer).
    The policy-gradient update is :math:`\sum_i \hat A_i \nabla_\theta \log
    \pi_\theta(o_i \mid q)`, so the habit's completions get a net push of
    :math:`|\mathcal H| \, \bar A_{\mathcal H}`: a reward that never looks at the habit
    still raises it when :math:`\bar A_{\mathcal H} > 0` (its completions score above
    their groups) and lowers it when :math:`\bar A_{\mathcal H} < 0`.

    Args:
        rewards: ``B`` rewards, each prompt's ``G`` completions contiguous.
        has_habit: ``B`` booleans, the same order.
        group_size: ``G``, >= 2.
        scale: as in :func:`group_advantages`.
    Returns:
        :math:`\bar A_{\mathcal H}`, a float; ``nan`` when no completion has the habit.
    """
    habit = torch.tensor(np.asarray(has_habit, dtype=bool))  # [B], a copy
    advantages = group_advantages(rewards, group_size, scale=scale)  # [B]
    if habit.shape != advantages.shape:
        raise ValueError(f"has_habit has {habit.numel()} entries for "
                         f"{advantages.numel()} rewards; give one flag per completion")
    if not habit.any():
        return float("nan")
    return float(advantages[habit].mean())
