"""The pieces of the GRPO objective, per token: ratio, clipped surrogate, KL penalty.

DeepSeekMath (Shao et al. 2024, eq. 3) maximises, for a group of ``G`` outputs,

.. math::

    \\frac1G \\sum_{i=1}^G \\frac{1}{|o_i|} \\sum_{t=1}^{|o_i|} \\Big\\{
      \\min\\big[\\rho_{i,t} \\hat A_{i,t},\\;
                \\operatorname{clip}(\\rho_{i,t}, 1-\\varepsilon, 1+\\varepsilon)\\,
                \\hat A_{i,t}\\big]
      - \\beta\\,
        \\mathbb D_{\\mathrm{KL}}[\\pi_\\theta \\Vert \\pi_{\\mathrm{ref}}] \\Big\\},
    \\qquad
    \\rho_{i,t} = \\frac{\\pi_\\theta(o_{i,t} \\mid q, o_{i,<t})}
                       {\\pi_{\\theta_{\\mathrm{old}}}(o_{i,t} \\mid q, o_{i,<t})}

This module gives each bracket as a function of per-token log-probabilities
(``[B, T]`` tensors); how the tokens are averaged (per sequence, per batch, ...) is the
loss variant's business (``grpo_lib.losses``).
"""
from __future__ import annotations

import torch

KL_KINDS = ("k1", "k2", "k3")


def _check_same_shape(a: torch.Tensor, b: torch.Tensor, names: str) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"{names} must have the same shape (one log-prob per completion token), "
            f"got {tuple(a.shape)} and {tuple(b.shape)}."
        )


def probability_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """Per-token probability ratio between the current and the sampling policy.

    .. math::

        \\rho_t = \\frac{\\pi_\\theta(o_t \\mid \\cdot)}
                      {\\pi_{\\theta_{\\mathrm{old}}}(o_t \\mid \\cdot)}
               = \\exp(\\log\\pi_\\theta - \\log\\pi_{\\theta_{\\mathrm{old}}})

    Computed in log space (a ratio of two tiny probabilities underflows). ``old_logp``
    is a constant (the policy that sampled the data), so it is detached: the gradient
    flows only through ``logp``. On the first of ``num_iterations`` updates the ratio is
    exactly 1 but its gradient is not 0: ``d rho / d theta = rho * d log pi_theta /
    d theta``.

    Args:
        logp: ``[B, T]`` log-probs of the sampled tokens under the current policy.
        old_logp: ``[B, T]`` log-probs of the same tokens under the sampling policy.

    Returns:
        ``[B, T]`` ratios.
    """
    _check_same_shape(logp, old_logp, "logp and old_logp")
    return torch.exp(logp - old_logp.detach())  # [B, T]


def _broadcast_advantages(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Advantages ``[B]`` (one per sequence) -> ``[B, 1]``, broadcasting over tokens."""
    if advantages.ndim == like.ndim - 1 and advantages.shape == like.shape[:-1]:
        return advantages.unsqueeze(-1)  # [B, 1]
    if advantages.shape == like.shape or advantages.numel() == 1:
        return advantages
    tokens = "" if like.shape[-1] == 1 else f" or one per token ({tuple(like.shape)})"
    raise ValueError(  # a ratio [B, 1] (GSPO) takes one advantage per sequence
        f"advantages of shape {tuple(advantages.shape)} do not fit the ratio of shape "
        f"{tuple(like.shape)}: pass one advantage per sequence ([B] = "
        f"{tuple(like.shape[:-1])}){tokens}.")


def clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
) -> torch.Tensor:
    """PPO's clipped surrogate per token: the quantity to MAXIMISE (Schulman et al.
    2017).

    .. math::

        L_t = \\min\\big(\\rho_t \\hat A,\\;
                  \\operatorname{clip}(\\rho_t, 1-\\varepsilon_{\\mathrm{low}},
                                       1+\\varepsilon_{\\mathrm{high}})\\, \\hat A\\big)

    With ``A > 0`` the min caps the gain once ``rho > 1 + eps_high`` (gradient 0 there);
    with ``A < 0`` it caps it once ``rho < 1 - eps_low``. On the other side the
    unclipped term is the smaller one, so a bad move is never hidden by the clip.
    ``epsilon_high`` defaults to ``epsilon`` (symmetric PPO/GRPO clipping); DAPO's
    clip-higher sets e.g. ``epsilon=0.2, epsilon_high=0.28`` (Yu et al. 2025).

    Args:
        ratio: ``[B, T]`` probability ratios (:func:`probability_ratio`).
        advantages: ``[B]`` (one per sequence, broadcast over tokens) or ``[B, T]``.
        epsilon: lower clip range ``eps_low`` (TRL's ``epsilon``).
        epsilon_high: upper clip range (TRL's ``epsilon_high``); ``None`` = ``epsilon``.

    Returns:
        ``[B, T]`` per-token surrogate (negate it for a loss).
    """
    eps_low = float(epsilon)
    eps_high = eps_low if epsilon_high is None else float(epsilon_high)
    if not (0 <= eps_low < 1) or eps_high < 0:
        raise ValueError(
            f"clip ranges must satisfy 0 <= epsilon < 1 and epsilon_high >= 0, got "
            f"epsilon={epsilon!r}, epsilon_high={epsilon_high!r} (usual: 0.2 and "
            f"0.2-0.28)."
        )
    adv = _broadcast_advantages(advantages, ratio)  # [B, 1] or [B, T]
    unclipped = ratio * adv  # [B, T]
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv  # [B, T]
    return torch.minimum(unclipped, clipped)  # [B, T]


def clipped_tokens(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which tokens the clip switched off (their surrogate has zero gradient).

    ``low``: ``rho < 1 - eps_low`` and ``A < 0``; ``high``: ``rho > 1 + eps_high`` and
    ``A > 0`` — the same definitions as TRL's ``clip_ratio/low_mean`` and
    ``clip_ratio/high_mean`` metrics.

    Returns:
        ``(low, high)``: two ``[B, T]`` boolean tensors.
    """
    eps_low = float(epsilon)
    eps_high = eps_low if epsilon_high is None else float(epsilon_high)
    adv = _broadcast_advantages(advantages, ratio)  # [B, 1] or [B, T]
    low = (ratio < 1.0 - eps_low) & (adv < 0)  # [B, T]
    high = (ratio > 1.0 + eps_high) & (adv > 0)  # [B, T]
    return low, high


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor,
                kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of the reverse KL ``KL(pi_theta || pi_ref)`` from policy
    samples.

    The tokens were sampled from the policy ``pi_theta``. With the reference log-ratio
    ``delta = log pi_theta - log pi_ref``, the reference ratio is
    ``pi_ref / pi_theta = exp(-delta)`` (Schulman 2020, "Approximating KL divergence"):

    .. math::

        k_1 = \\delta, \\qquad
        k_2 = \\tfrac12 \\delta^2, \\qquad
        k_3 = e^{-\\delta} + \\delta - 1

    Each is an estimator of ``KL(pi_theta || pi_ref) = E_{x ~ pi_theta}[delta(x)]``:
    ``k1`` is unbiased but can be negative; ``k2`` is biased (its mean is an
    f-divergence that agrees with KL to second order); ``k3`` is unbiased
    (``E[exp(-delta)] = 1``) and never negative. Near pi_ref, k2 and k3 vary far less
    than k1; far from it, more (chapter 2). k3 is the one GRPO uses (DeepSeekMath eq. 4:
    ``pi_ref/pi_theta - log(pi_ref/pi_theta) - 1``) and TRL's ``GRPOTrainer`` computes.

    **Their gradients as a loss are different things.** Minimising ``E_{x~pi}[k(x)]``
    with the samples held fixed (what a trainer does: ``beta * k`` added to the
    per-token loss) gives, in expectation over on-policy samples,

    * ``k1``: ``E[grad log pi] = 0`` — no signal at all, only noise;
    * ``k2``: ``E[delta grad log pi] = grad KL(pi_theta || pi_ref)``, the gradient of
      the reverse KL;
    * ``k3``: ``E[(1 - exp(-delta)) grad log pi] = -E_{pi_ref}[grad log pi]
      = grad KL(pi_ref || pi_theta)``, the gradient of the *forward* KL, not of the KL
      that ``k3`` estimates. Chapter 2 checks all three with autograd on a categorical
      distribution with exact expectations.

    Multiplying ``k3`` by the policy ratio ``rho = pi_theta / pi_old`` (value 1
    on-policy, gradient ``grad log pi``) turns its gradient into the reverse-KL one:
    ``grad(rho k3) = (1 - exp(-delta) + k3) grad log pi = delta grad log pi``. TRL 1.16
    does this by default (``use_bias_correction_kl=True``, after DeepSeek-V3.2).

    Args:
        logp: ``[B, T]`` log-probs of the sampled tokens under the policy.
        ref_logp: ``[B, T]`` log-probs of the same tokens under the reference model.
        kind: ``"k1"`` | ``"k2"`` | ``"k3"``.

    Returns:
        ``[B, T]`` per-token estimates (differentiable w.r.t. both inputs).
    """
    _check_same_shape(logp, ref_logp, "logp and ref_logp")
    delta = logp - ref_logp  # [B, T]  log pi_theta - log pi_ref
    if kind == "k1":
        return delta
    if kind == "k2":
        return 0.5 * delta.pow(2)
    if kind == "k3":
        # exp(-delta) + delta - 1: TRL's GRPOTrainer per_token_kl, with
        # ref - logp = -delta in its exponent.
        return torch.exp(-delta) + delta - 1.0
    raise ValueError(f"kind={kind!r} is not one of {KL_KINDS} (Schulman's estimators; "
                     f"GRPO uses 'k3').")


@torch.no_grad()
def sync_reference(policy: torch.nn.Module, reference: torch.nn.Module,
                   alpha: float) -> None:
    """Move the KL reference toward the policy, in place (TR-DPO's soft update).

    .. math:: \\theta_{\\mathrm{ref}} \\leftarrow \\alpha\\,\\theta
              + (1 - \\alpha)\\,\\theta_{\\mathrm{ref}}

    TR-DPO (Gorbatovski et al. 2024) mixes every few steps (TRL's
    ``ref_model_mixup_alpha``, default 0.6, and ``ref_model_sync_steps``);
    :math:`\\alpha = 1` replaces the reference by the policy, as ProRL's reference
    reset does (Liu et al. 2025, which also resets the optimizer). Either way the KL
    term then pulls toward a recent policy, not the initial one. The two models must
    have the same parameters.
    """
    refs, thetas = list(reference.parameters()), list(policy.parameters())
    if [r.shape for r in refs] != [t.shape for t in thetas]:
        raise ValueError("the reference and the policy have different parameters: "
                         "a reference can only be synced with a model of its shape.")
    for ref, theta in zip(refs, thetas):
        ref.mul_(1.0 - alpha).add_(theta.to(ref.dtype), alpha=alpha)

