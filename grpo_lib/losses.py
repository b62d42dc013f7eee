"""Policy losses: one per-token objective, five ways to average it, and its variants.

"Algorithm = credit assigner + loss." The *credit assigner* (``grpo_lib.advantages``)
turns rewards into one advantage per completion; the *loss* below turns advantages and
log-probabilities into the scalar we differentiate. The variants in the literature
differ mostly in how they **aggregate** the per-token terms :math:`\\ell_{i,t}`, and
that choice decides which completions the gradient favours (short or long ones):

* ``grpo`` — :math:`\\frac1B\\sum_i \\frac{1}{|o_i|}\\sum_t \\ell_{i,t}`, sequence mean
  then batch mean (DeepSeekMath eq. 3);
* ``bnpo`` — :math:`\\sum_{i,t} \\ell_{i,t} / \\sum_i |o_i|`, token mean of each
  micro-batch (TRL);
* ``dr_grpo`` — :math:`\\sum_{i,t} \\ell_{i,t} / (B\\,L_{\\max})`, a constant
  denominator (Dr. GRPO, Liu et al. 2025);
* ``dapo`` — :math:`\\sum_{i,t} \\ell_{i,t} / N_{\\text{tokens}}`, token mean of the
  whole accumulated batch (DAPO, Yu et al. 2025, sec. 3.3);
* ``reinforce`` — :math:`-\\frac1B\\sum_i A_i \\sum_t \\log\\pi_\\theta(o_{i,t})`,
  REINFORCE with the group mean as baseline: no ratio, no clip (as in picoRL);
* ``cispo`` — :math:`-\\sum_{i,t} \\mathrm{sg}(\\min(\\rho_{i,t}, \\varepsilon_{\\max}))
  A_i \\log\\pi_\\theta(o_{i,t}) / N_{\\text{tokens}}`: the clip moves from the
  surrogate to a stop-gradient weight, so no token loses its gradient (MiniMax-M1,
  2025; TRL ``loss_type="cispo"``).

* ``sapo`` — :math:`-\\frac{4}{\\gamma}\\sigma\\big(\\gamma(\\rho_{i,t}-1)\\big) A_i` in
  place of the clipped term, a smooth gate instead of a hard clip (SAPO, Gao et al.
  2025; TRL ``loss_type="sapo"``), aggregated as ``grpo``;
* ``luspo`` — the clipped term aggregated as ``reinforce``, each completion's sum:
  with GSPO's sequence ratio, each completion's loss times its length (LUSPO, 2026;
  TRL ``loss_type="luspo"``);
* ``vespo`` — :math:`-\\mathrm{sg}(\\phi(w_i)) A_i \\log\\pi_\\theta(o_{i,t})`, a
  gamma-shaped weight of the whole completion's ratio in place of any clip,
  aggregated as ``dapo`` (VESPO, 2026; TRL ``loss_type="vespo"``).

Orthogonal to the aggregation, ``importance_sampling_level="sequence"`` replaces the
per-token ratio by one ratio per completion, the geometric mean of its tokens' ratios
(GSPO, Zheng et al. 2025; TRL ``importance_sampling_level="sequence"``). Three more
knobs of TRL 1.16 act on single tokens or completions: ``delta`` caps the unclipped
ratio (two-sided clipping, INTELLECT-2), :func:`high_entropy_mask` keeps only the
policy terms of the highest-entropy tokens (Wang et al. 2025) and
:func:`off_policy_sequence_mask` drops negative-advantage completions the policy has
moved far from (DeepSeek-V3.2); the last two reach :func:`policy_loss` as ``keep``.

For the four clipped variants the per-token loss is the negated PPO/GRPO clipped
surrogate plus the KL penalty (DeepSeekMath eq. 3-4, Schulman's k3 estimator):

.. math::

    \\ell_{i,t} = -\\min\\big(\\rho_{i,t} A_i,\\;
        \\operatorname{clip}(\\rho_{i,t}, 1-\\varepsilon_{\\mathrm{low}},
                             1+\\varepsilon_{\\mathrm{high}}) A_i\\big)
        + \\beta\\, \\mathbb{D}^{k3}_{i,t},
    \\qquad \\rho_{i,t} = \\frac{\\pi_\\theta(o_{i,t}|q, o_{i,<t})}
                           {\\pi_{\\theta_{\\mathrm{old}}}(o_{i,t}|q, o_{i,<t})}

Gradient accumulation follows TRL 1.16 (``GRPOTrainer._compute_loss``) exactly, so that
a batch split into ``K`` micro-batches gives the loss TRL gives: ``grpo``, ``bnpo``,
``dr_grpo`` and ``reinforce`` divide each micro-batch's value by ``K``; ``dapo`` divides
each micro-batch's token sum by the number of active tokens in the *whole* batch
(``num_items_in_batch``), so the sum over micro-batches is one global token mean.
"""

from __future__ import annotations

import math

import torch

from .objective import clipped_surrogate, clipped_tokens, kl_estimate, probability_ratio

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "reinforce", "cispo", "sapo", "luspo",
              "vespo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")  # PPO's clip
VESPO_SHAPE = (2.0, 3.0, 3.0, 2.0)  # TRL's (k+, lambda+, k-, lambda-)


# --------------------------------------------------------------------------------------
# Aggregations: [B, T] per-token losses -> one scalar. One concept, one function.
# --------------------------------------------------------------------------------------
def aggregate_grpo(per_token_loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sequence-mean, then batch-mean (DeepSeekMath eq. 3, TRL ``loss_type="grpo"``).

    .. math:: L = \\frac1B \\sum_{i=1}^{B} \\frac{1}{|o_i|}
              \\sum_{t=1}^{|o_i|} \\ell_{i,t}

    Every completion weighs the same whatever its length, so each token of a long
    completion weighs less than a token of a short one: the length bias that Dr. GRPO
    (Liu et al. 2025) points out.
    An all-masked row counts as length 1 (contributes 0), as in TRL.
    """
    per_seq = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
    return per_seq.mean()


def aggregate_bnpo(per_token_loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token mean over the (micro-)batch (TRL ``loss_type="bnpo"``).

    .. math:: L = \\frac{\\sum_{i,t} m_{i,t}\\, \\ell_{i,t}}{\\sum_{i,t} m_{i,t}}

    Every token weighs the same *within a micro-batch*; with gradient accumulation the
    normaliser changes from one micro-batch to the next (unlike ``dapo``).
    """
    return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)


def aggregate_dr_grpo(
    per_token_loss: torch.Tensor, mask: torch.Tensor, max_completion_length: int
) -> torch.Tensor:
    """Token sum over a constant (Dr. GRPO, Liu et al. 2025; TRL ``"dr_grpo"``).

    .. math:: L = \\frac{\\sum_{i,t} m_{i,t}\\, \\ell_{i,t}}{B \\cdot L_{\\max}}

    The denominator does not depend on the sampled lengths, which removes the length
    bias of ``grpo``: each token's gradient has the same weight in every batch.
    """
    if max_completion_length is None or max_completion_length <= 0:
        raise ValueError(
            f"loss_type='dr_grpo' divides by B * max_completion_length, but "
            f"max_completion_length={max_completion_length!r}. Pass the generation "
            f"limit (the trainer's config.max_completion_length), e.g. "
            f"max_completion_length=64."
        )
    batch_size = per_token_loss.size(0)  # B of this micro-batch
    return (per_token_loss * mask).sum() / (batch_size * max_completion_length)


def aggregate_dapo(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    num_items_in_batch: torch.Tensor | float,
) -> torch.Tensor:
    """Token-level normalisation over the whole batch (DAPO, Yu et al. 2025, sec. 3.3).

    .. math:: L = \\frac{\\sum_{i,t} m_{i,t}\\, \\ell_{i,t}}{N}, \\qquad
              N = \\sum_{\\text{all micro-batches}} \\sum_{i,t} m_{i,t}

    ``num_items_in_batch`` is ``N``, the active-token count of the whole (accumulated)
    batch, so summing this over micro-batches gives one token mean for the whole batch:
    every token in the step weighs the same (TRL ``"dapo"``).
    """
    n = torch.as_tensor(
        num_items_in_batch, dtype=per_token_loss.dtype, device=per_token_loss.device
    )
    return (per_token_loss * mask).sum() / n.clamp(min=1.0)


def aggregate_reinforce(
    per_token_loss: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Sum over tokens, mean over sequences (REINFORCE's sequence log-likelihood).

    .. math:: L = \\frac1B \\sum_{i=1}^{B} \\sum_{t=1}^{|o_i|} \\ell_{i,t}

    With :math:`\\ell_{i,t} = -A_i \\log\\pi_\\theta(o_{i,t})` this is
    :math:`-\\frac1B\\sum_i A_i \\log\\pi_\\theta(o_i|q)`, picoRL's
    ``-(A * logprobs.sum(-1)).mean()``.
    """
    return (per_token_loss * mask).sum(-1).mean()


# --------------------------------------------------------------------------------------
# Per-token losses
# --------------------------------------------------------------------------------------
def clipped_token_loss(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
) -> torch.Tensor:
    """Negated clipped surrogate per token (PPO eq. 7, DeepSeekMath eq. 3).

    .. math:: \\ell_{i,t} = -\\min\\big(\\min(\\rho_{i,t}, \\rho_{\\max}) A_i,\\;
        \\operatorname{clip}(\\rho_{i,t}, 1-\\varepsilon_{\\mathrm{low}},
                             1+\\varepsilon_{\\mathrm{high}}) A_i\\big)

    ``delta`` is :math:`\\rho_{\\max}`; ``None`` is :math:`\\rho_{\\max} = \\infty`,
    PPO's clip. With ``A < 0`` PPO's min keeps the unclipped :math:`\\rho A`, so one
    token whose ratio has grown far can weigh without bound; two-sided clipping caps
    that ratio at :math:`\\rho_{\\max} > 1 + \\varepsilon_{\\mathrm{high}}`, beyond
    which the token has no gradient (INTELLECT-2, which uses 4; verl's "dual clip",
    ``clip_ratio_c``).
    ``ratio``: ``[B, T]`` token ratios, or ``[B, 1]`` GSPO sequence ratios. Returns the
    per-token loss, ``[B, T]`` or ``[B, 1]`` (the aggregation broadcasts it).
    """
    if delta is not None:  # clip(min(rho, rho_max)) = clip(rho): rho_max > 1 + eps_high
        ratio = ratio.clamp(max=delta)
    return -clipped_surrogate(ratio, advantages, epsilon=epsilon,
                              epsilon_high=epsilon_high)


def reinforce_token_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """REINFORCE with the group baseline, per token.

    .. math:: \\ell_{i,t} = -A_i \\log\\pi_\\theta(o_{i,t})

    No ratio and no clip: the gradient is
    :math:`-A_i \\nabla\\log\\pi_\\theta(o_{i,t})`, the plain policy gradient (Williams
    1992) with the group mean as baseline. Only valid on-policy (samples from the
    current policy, ``num_iterations=1``).
    """
    return -advantages * logp  # [B, T]


def sequence_log_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """GSPO's sequence-level log-ratio: the mean of the token log-ratios.

    .. math:: \\log s_i = \\frac{1}{|o_i|} \\sum_{t=1}^{|o_i|}
              \\log\\frac{\\pi_\\theta(o_{i,t})}
                        {\\pi_{\\theta_{\\mathrm{old}}}(o_{i,t})}

    :math:`s_i` is the geometric mean of the token ratios: one number per completion,
    so the clip keeps or drops a completion whole (Zheng et al. 2025, eq. 7). An empty
    completion gets :math:`\\log s_i = 0`. ``[B, T]`` in, ``[B, 1]`` out.
    """
    log_ratio = (logp - old_logp.detach()) * mask  # [B, T]
    return log_ratio.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)


def cispo_token_loss(
    logp: torch.Tensor, ratio: torch.Tensor, advantages: torch.Tensor,
    epsilon_max: float,
) -> torch.Tensor:
    """CISPO per token: REINFORCE weighted by a capped, detached ratio.

    .. math:: \\ell_{i,t} = -\\,\\mathrm{sg}\\big(\\min(\\rho_{i,t},
              \\varepsilon_{\\max})\\big)\\, A_i \\log\\pi_\\theta(o_{i,t})

    PPO's clip zeroes a token's gradient once its ratio leaves the range on its
    advantage's side; CISPO keeps all gradients, caps the weight (MiniMax-M1, sec. 3.1).
    ``ratio`` ``[B, T]`` or ``[B, 1]``, ``advantages`` ``[B, 1]`` or ``[B, T]``.
    """
    weight = torch.clamp(ratio, max=epsilon_max).detach()  # [B, T] or [B, 1]
    return -weight * advantages * logp  # [B, T]


def sapo_token_loss(
    ratio: torch.Tensor, advantages: torch.Tensor, gamma_pos: float = 1.0,
    gamma_neg: float = 1.05,
) -> torch.Tensor:
    """SAPO per token: a sigmoid gate on the ratio in place of the hard clip.

    .. math:: \\ell_{i,t} = -\\frac{4}{\\gamma_i}\\,
              \\sigma\\big(\\gamma_i(\\rho_{i,t} - 1)\\big)\\, A_i, \\qquad
              \\gamma_i = \\gamma_{+} \\text{ if } A_i > 0 \\text{ else } \\gamma_{-}

    Its gradient is :math:`-4\\sigma(1-\\sigma)\\,\\rho_{i,t} A_i
    \\nabla\\log\\pi_\\theta`: at :math:`\\rho = 1` exactly GRPO's, and it fades
    smoothly as the ratio leaves 1, faster for a sharper gate :math:`\\gamma` (Gao et
    al. 2025 call it a temperature; TRL's defaults :math:`\\gamma_+ = 1`,
    :math:`\\gamma_- = 1.05`). ``ratio`` ``[B, T]`` or ``[B, 1]``, ``advantages``
    ``[B, 1]`` or ``[B, T]``.
    """
    gamma = torch.where(advantages > 0, gamma_pos, gamma_neg)  # [B, 1] or [B, T]
    return -torch.sigmoid(gamma * (ratio - 1)) * 4 / gamma * advantages  # [B, T]


@torch.no_grad()
def vespo_weights(
    log_ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
    shape: tuple[float, float, float, float] = VESPO_SHAPE,
    sampling_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """VESPO's weight of a completion: a gamma-shaped function of its ratio.

    .. math:: \\phi(w_i) = w_i^{m}\\, e^{\\nu (1 - w_i)}, \\qquad
              w_i = \\prod_t \\rho_{i,t}, \\qquad (m, \\nu) = (m_+, \\nu_+)
              \\text{ if } A_i \\ge 0 \\text{ else } (m_-, \\nu_-)

    :math:`\\phi(1) = 1`; it peaks at :math:`w = m/\\nu` and falls to 0 both
    ways, like :math:`w^m` as the ratio vanishes and like :math:`e^{-\\nu w}` as it
    grows (the paper's k and lambda). ``shape`` is :math:`(m_+, \\nu_+, m_-, \\nu_-)`,
    TRL's ``vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg``. The ratio is
    the product of the token ratios, not GSPO's geometric mean, computed in log space
    and clamped to :math:`[10^{-8}, e^{20}]` as TRL does. ``sampling_weights``
    (:math:`\\pi_{old}/\\pi_{sampler}` per token) are folded into :math:`w_i`.
    ``log_ratio, mask``: ``[B, T]``; ``advantages``: ``[B, 1]``; returns ``[B, 1]``.
    """
    k_pos, lambda_pos, k_neg, lambda_neg = shape
    floor = math.log(1e-8)
    log_w = (log_ratio.clamp(-20.0, 20.0) * mask).sum(-1, keepdim=True)  # [B, 1]
    if sampling_weights is not None:  # log(pi_old / pi_sampler), token by token
        log_is = sampling_weights.log().clamp(floor, 20.0) * mask  # [B, T]
        log_w = log_w + log_is.sum(-1, keepdim=True)
    log_w = log_w.clamp(floor, 20.0)
    nonneg = advantages >= 0  # [B, 1]
    k = torch.where(nonneg, k_pos, k_neg)
    lam = torch.where(nonneg, lambda_pos, lambda_neg).clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * log_w.exp())  # [B, 1]
    return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def high_entropy_mask(
    entropy: torch.Tensor, mask: torch.Tensor, quantile: float
) -> torch.Tensor:
    """The tokens whose entropy is in the top ``quantile`` share of this micro-batch.

    .. math:: m_{i,t}\\,\\mathbb 1\\big[H_{i,t} \\ge H_{(1-\\lambda)}\\big]

    :math:`H_{(1-\\lambda)}` is the :math:`1-\\lambda` quantile of the entropies of the
    active tokens (``torch.quantile``, linear interpolation). Wang et al. (2025) keep
    the policy gradient of only the ~20% of tokens where the policy hesitates
    ("forks"), :math:`\\lambda = 0.2`: as good as every token on an 8B model, better on
    14B and 32B (TRL's ``top_entropy_quantile``, over each micro-batch as here).
    ``entropy``, ``mask``: ``[B, T]``; returns a ``[B, T]`` 0/1 tensor of ``entropy``'s
    dtype.
    """
    check_entropy_quantile(quantile)
    entropy = entropy.detach()  # a mask: no gradient flows through it
    active = entropy[mask.bool()].float()  # [N]
    if active.numel() == 0:
        return torch.zeros_like(entropy)
    threshold = torch.quantile(active, 1.0 - quantile)
    return ((entropy * mask >= threshold) & mask.bool()).to(entropy.dtype)


def off_policy_sequence_mask(
    advantages: torch.Tensor, logp: torch.Tensor, behaviour_logp: torch.Tensor,
    mask: torch.Tensor, threshold: float,
) -> torch.Tensor:
    """DeepSeek-V3.2's off-policy sequence mask: which completions keep their term.

    .. math:: \\mathbb 1\\Big[A_i \\ge 0 \\;\\lor\\; \\tfrac{1}{|o_i|}\\sum_t
              \\big(\\log\\pi_{\\theta_{\\mathrm{old}}}(o_{i,t})
              - \\log\\pi_\\theta(o_{i,t})\\big) \\le \\kappa\\Big]

    :math:`\\pi_{\\theta_{\\mathrm{old}}}` is the policy that sampled the completion
    (``behaviour_logp``: the old log-probs, or the sampler's own where they differ).
    A completion with a negative advantage that the current policy has already moved
    far from teaches little and can destabilise training, so it is dropped
    (DeepSeek-AI 2025, eq. 9, where the threshold is :math:`\\delta`; TRL's
    ``off_policy_mask_threshold``). On-policy the mean is 0 and nothing is dropped.
    ``advantages`` ``[B]`` or ``[B, 1]``, the rest ``[B, T]``; returns ``[B, 1]``.
    """
    adv = advantages.detach().reshape(len(advantages), -1)[:, :1]  # [B, 1]
    gap = (behaviour_logp.detach() - logp.detach()).nan_to_num(nan=0.0) * mask
    mean_gap = gap.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)
    return ((adv >= 0) | (mean_gap <= threshold)).to(logp.dtype)  # [B, 1]


# --------------------------------------------------------------------------------------
# The loss the trainer calls
# --------------------------------------------------------------------------------------
SAMPLING_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate",
                     "sequence_mask")


def sampling_importance_weights(
    trainer_logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "sequence_mask",
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
) -> torch.Tensor:
    r"""Importance weights for the gap between the sampler's numerics and the
    trainer's (TRL's ``vllm_importance_sampling_correction``).

    The tokens were drawn by the sampler, :math:`\mu`; the loss is written for the
    trainer's :math:`\pi_{\mathrm{old}}` (the same weights, other kernels, perhaps
    another dtype). Weighting each token's loss by their ratio makes it an estimate
    under :math:`\pi_{\mathrm{old}}` again:

    .. math::

        w_{i,t} = \frac{\pi_{\mathrm{old}}(o_{i,t})}{\mu(o_{i,t})}
                = e^{\ell^{\mathrm{old}}_{i,t} - \ell^{\mu}_{i,t}}
        \ (\texttt{token\_*}), \qquad
        w_i = e^{\sum_t (\ell^{\mathrm{old}}_{i,t} - \ell^{\mu}_{i,t})}
        \ (\texttt{sequence\_*})

    A rare token can make :math:`w` huge, so it is bounded: ``*_truncate`` clips it to
    ``[clip_min, clip_max]``, ``*_mask`` sets it to 0 outside that range (the token or
    the whole completion stops counting). ``None`` leaves a side open. ``trainer_logp,
    sampler_logp, mask``: ``[B, T]``. Returns detached weights, ``[B, T]`` (token
    modes) or ``[B, 1]`` (sequence modes), to multiply the per-token loss.
    """
    if mode not in SAMPLING_IS_MODES:
        raise ValueError(f"mode={mode!r}; choose one of {SAMPLING_IS_MODES}.")
    if trainer_logp.shape != sampler_logp.shape or trainer_logp.shape != mask.shape:
        raise ValueError(
            f"trainer_logp {tuple(trainer_logp.shape)}, sampler_logp "
            f"{tuple(sampler_logp.shape)} and mask {tuple(mask.shape)} must match.")
    with torch.no_grad():
        gap = (trainer_logp.float() - sampler_logp.float()) * mask  # [B, T]
        gap = torch.nan_to_num(gap, nan=0.0)  # an unknown log-prob: weight 1
        if mode.startswith("sequence"):
            gap = gap.sum(dim=-1, keepdim=True)  # [B, 1]
        w = gap.exp()
        low = -math.inf if clip_min is None else clip_min
        high = math.inf if clip_max is None else clip_max
        if mode.endswith("truncate"):
            return w.clamp(min=low, max=high)
        return w.masked_fill((w < low) | (w > high), 0.0)


def check_entropy_quantile(quantile: float) -> None:
    """``top_entropy_quantile`` is a share of tokens: 0 to 1."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"top_entropy_quantile={quantile!r}: the share of tokens "
                         f"kept, between 0 and 1 (1 keeps all; Wang et al. use 0.2).")


def check_loss_settings(
    loss_type: str, epsilon_high: float | None, importance_sampling_level: str,
    delta: float | None = None, epsilon: float = 0.2,
    sapo_temperatures: tuple[float, float] = (1.0, 1.05),
    vespo_shape: tuple[float, float, float, float] = VESPO_SHAPE,
) -> None:
    """The settings that only some loss types accept; one message each."""
    for name, value in zip(("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
                            "vespo_lambda_neg"), vespo_shape):
        is_k = name.startswith("vespo_k")
        if not (math.isfinite(value) and (value >= 0 if is_k else value > 0)):
            raise ValueError(
                f"{name}={value!r}: VESPO's weight w^k e^(lambda (1 - w)) needs k >= 0 "
                f"and lambda > 0, finite (TRL's defaults: k 2 and 3, lambda 3 and 2 "
                f"for A >= 0 and A < 0).")
    for name, gamma in zip(("sapo_temperature_pos", "sapo_temperature_neg"),
                           sapo_temperatures):
        if not (math.isfinite(gamma) and gamma > 0):
            raise ValueError(
                f"{name}={gamma!r}: the SAPO gate's temperature must be > 0 (TRL's "
                f"defaults: 1.0 for A > 0, 1.05 for A <= 0).")
    if delta is not None:
        eps_high = epsilon if epsilon_high is None else epsilon_high
        if loss_type not in CLIPPED_LOSS_TYPES:
            raise ValueError(
                f"delta={delta!r} caps the ratio of the clipped surrogate, which "
                f"loss_type={loss_type!r} does not use; set delta=None, or use one of "
                f"{CLIPPED_LOSS_TYPES}.")
        if not (math.isfinite(delta) and delta > 1 + eps_high):
            raise ValueError(
                f"delta={delta!r}: the cap on the unclipped ratio must be above the "
                f"clip range's top, 1 + epsilon_high = {1 + eps_high:g} (INTELLECT-2 "
                f"uses 4); None turns two-sided clipping off.")
    if importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            f"importance_sampling_level={importance_sampling_level!r}; choose "
            f"'token' (PPO/GRPO) or 'sequence' (GSPO).")
    if importance_sampling_level == "sequence" and loss_type == "reinforce":
        raise ValueError(
            "importance_sampling_level='sequence' changes the ratio, and "
            "loss_type='reinforce' has none; use loss_type='grpo' (GSPO's setting).")
    if loss_type == "cispo" and (epsilon_high is None or not epsilon_high > 1):
        raise ValueError(
            f"loss_type='cispo' caps the ratio itself at epsilon_high (its "
            f"epsilon_max), got epsilon_high={epsilon_high!r}; it must be > 1, or "
            f"every on-policy token's weight (ratio 1) is cut. TRL's docs and "
            f"ScaleRL use 5.0.")


def _check_inputs(logp, old_logp, advantages, mask, loss_type, epsilon, beta, ref_logp):
    if loss_type not in LOSS_TYPES:
        raise ValueError(
            f"loss_type={loss_type!r} is unknown. Choose one of {LOSS_TYPES} "
            f"(TRL's default is 'dapo'; DeepSeekMath's formula is 'grpo')."
        )
    if logp.ndim != 2:
        raise ValueError(
            f"logp must be [B, T] per-token log-probs, got shape {tuple(logp.shape)}."
        )
    if mask.shape != logp.shape:
        raise ValueError(
            f"mask shape {tuple(mask.shape)} differs from logp shape "
            f"{tuple(logp.shape)}; "
            f"pass the completion mask that goes with these log-probs."
        )
    if old_logp is not None and old_logp.shape != logp.shape:
        raise ValueError(
            f"old_logp shape {tuple(old_logp.shape)} differs from logp shape "
            f"{tuple(logp.shape)}; both must score the same completion tokens."
        )
    if advantages.shape[0] != logp.shape[0] or advantages.ndim > 2:
        raise ValueError(
            f"advantages must be [B] (one per completion) or [B, T], got shape "
            f"{tuple(advantages.shape)} for B={logp.shape[0]}."
        )
    if not epsilon > 0:
        raise ValueError(
            f"epsilon must be > 0 (the clip range 1 +- epsilon), got {epsilon!r}; "
            f"the usual value is 0.2."
        )
    if beta != 0.0 and ref_logp is None:
        raise ValueError(
            f"beta={beta} adds a KL penalty to the reference model, but ref_logp is "
            f"None. "
            f"Pass the reference model's per-token log-probs, or set beta=0.0."
        )


@torch.no_grad()
def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return ((x * mask).sum() / mask.sum().clamp(min=1.0)).item()


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str = "grpo",
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    max_completion_length: int | None = None,
    use_bias_correction_kl: bool = True,
    num_micro_batches: float = 1,
    num_items_in_batch: torch.Tensor | float | None = None,
    sampling_weights: torch.Tensor | None = None,
    importance_sampling_level: str = "token",
    delta: float | None = None,
    keep: torch.Tensor | None = None,
    sapo_temperatures: tuple[float, float] = (1.0, 1.05),
    vespo_shape: tuple[float, float, float, float] = VESPO_SHAPE,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO-family policy loss of one micro-batch, ready for ``loss.backward()``.

    .. math::

        \\mathcal L = \\operatorname{Agg}_{\\texttt{loss\\_type}}\\Big(
            \\ell^{clip}_{i,t} + \\beta\\,\\mathbb D^{k3}_{i,t}\\Big), \\qquad
        \\mathbb D^{k3}_{i,t} = e^{-\\delta_{i,t}} + \\delta_{i,t} - 1, \\qquad
        \\delta_{i,t} = \\log\\pi_\\theta(o_{i,t}) - \\log\\pi_{\\mathrm{ref}}(o_{i,t})

    (DeepSeekMath eq. 3-4), where ``Agg`` is one of the ``aggregate_*`` functions above
    and ``loss_type="reinforce"`` replaces :math:`\\ell^{clip}` by
    :math:`-A_i\\log\\pi_\\theta(o_{i,t})`, ``"cispo"`` by
    :func:`cispo_token_loss` (aggregated as ``dapo``), ``"sapo"`` by
    :func:`sapo_token_loss` (aggregated as ``grpo``), ``"vespo"`` by
    :math:`-\\phi(w_i) A_i \\log\\pi_\\theta(o_{i,t})` (:func:`vespo_weights`,
    aggregated as ``dapo``); ``"luspo"`` keeps the clipped term and sums each
    completion's tokens (``aggregate_reinforce``). The KL term is added per token
    *before* aggregation, as in TRL. With ``use_bias_correction_kl=True`` (TRL 1.16's
    default, from DeepSeek-V3.2) the KL term is
    :math:`\\beta\\, \\rho_{i,t}\\, \\mathbb D^{k3}_{i,t}`: the policy ratio
    :math:`\\rho_{i,t}` is 1 on-policy, so the *value* is unchanged, but its gradient
    turns k3's gradient (that of
    :math:`\\mathbb D_{\\mathrm{KL}}(\\pi_{\\mathrm{ref}}\\Vert\\pi_\\theta)`) into the
    gradient of the reverse KL
    :math:`\\mathbb D_{\\mathrm{KL}}(\\pi_\\theta\\Vert\\pi_{\\mathrm{ref}})` that k3
    estimates.

    Args:
        logp: ``[B, T]`` log-probs of the sampled tokens under the current policy
            (with grad).
        old_logp: ``[B, T]`` log-probs under the sampling policy (no grad). ``None``
            means on-policy (``num_iterations=1``): ``old_logp = logp.detach()``, so the
            ratio is 1 but its gradient is still :math:`\\nabla\\log\\pi_\\theta`.
        advantages: ``[B]`` (one per completion) or ``[B, T]`` (token ratios only).
        mask: ``[B, T]`` 1 for completion tokens that count (up to and including EOS).
        loss_type: ``"grpo" | "bnpo" | "dr_grpo" | "dapo" | "reinforce" | "cispo"
            | "sapo" | "luspo" | "vespo"``.
        epsilon, epsilon_high: the clip range ``[1 - epsilon, 1 + epsilon_high]`` of
            the policy ratio;
            ``epsilon_high=None`` means symmetric (DAPO's clip-higher uses 0.28).
            For ``cispo``, ``epsilon_high`` is the cap on the ratio itself
            (:math:`\\varepsilon_{\\max}`, e.g. 5.0), as in TRL.
        beta: KL coefficient; needs ``ref_logp`` ``[B, T]`` when non-zero.
        max_completion_length: ``L_max`` for ``dr_grpo``.
        use_bias_correction_kl: multiply the per-token KL by the ratio (see above).
        num_micro_batches: ``K``, micro-batches accumulated into one optimizer step
            (for equal micro-batches; in general ``B_total / B_this``, which weighs
            each micro-batch by its share of the rows — the trainer passes that).
        num_items_in_batch: active tokens in the whole accumulated batch (``dapo``);
            defaults to this micro-batch's ``mask.sum()``.
        sampling_weights: ``[B, T]`` or ``[B, 1]`` importance weights for the
            sampler/trainer gap (:func:`sampling_importance_weights`); they multiply
            the per-token policy loss before the KL term is added, as in TRL; for
            ``vespo`` they are per token and enter :func:`vespo_weights` instead.
        importance_sampling_level: ``"token"`` (one ratio per token) or
            ``"sequence"`` (GSPO: one ratio per completion, :func:`sequence_log_ratio`);
            the KL's bias correction uses it too, and then is not the reverse KL's.
        delta: two-sided clipping's cap on the unclipped ratio
            (:func:`clipped_token_loss`); ``None``: none.
        keep: ``[B, T]`` or ``[B, 1]`` 0/1 factors on the policy term only (the KL
            term stays), as TRL applies :func:`high_entropy_mask` and
            :func:`off_policy_sequence_mask`.
        sapo_temperatures: ``(gamma_pos, gamma_neg)`` of ``loss_type="sapo"``
            (TRL's ``sapo_temperature_pos``, ``sapo_temperature_neg``).
        vespo_shape: ``(k_pos, lambda_pos, k_neg, lambda_neg)`` of
            ``loss_type="vespo"`` (TRL's ``vespo_*``).

    Returns:
        ``(loss, stats)``; ``stats`` holds floats measured on this micro-batch's active
        tokens: ``policy_loss`` (the loss before the ``1/K`` accumulation factor),
        ``kl`` (mean k3; NaN when ``beta == 0``: no reference), ``clip_frac_low``,
        ``clip_frac_high``, ``clip_frac_region`` (share of tokens whose ratio left the
        clip range on the side where clipping removes the gradient: ``rho < 1-eps``
        with ``A < 0``, ``rho > 1+eps_high`` with ``A > 0``, either; for ``cispo``,
        ``high`` is the share whose weight was capped, ``rho > eps_max`` with
        ``A > 0``, TRL's ``cispo_clip_ratio``; a sequence ratio counts for each of
        its tokens), ``ratio_mean``,
        ``ratio_max`` and ``num_tokens``.
    """
    _check_inputs(logp, old_logp, advantages, mask, loss_type, epsilon, beta, ref_logp)
    check_loss_settings(loss_type, epsilon_high, importance_sampling_level, delta,
                        epsilon, sapo_temperatures, vespo_shape)
    mask = mask.to(logp.dtype)  # [B, T]
    advantages = advantages.to(logp.dtype)  # [B] or [B, T]
    adv = (
        advantages.unsqueeze(1) if advantages.ndim == 1 else advantages
    )  # [B, 1] or [B, T]
    old_logp = logp.detach() if old_logp is None else old_logp  # [B, T]
    eps_high = epsilon if epsilon_high is None else epsilon_high

    if importance_sampling_level == "sequence":  # GSPO
        ratio = sequence_log_ratio(logp, old_logp, mask).exp()  # [B, 1]
    else:
        ratio = probability_ratio(logp, old_logp)  # [B, T]

    if loss_type == "reinforce":
        per_token_loss = reinforce_token_loss(logp, adv)  # [B, T]
    elif loss_type == "cispo":
        per_token_loss = cispo_token_loss(logp, ratio, adv, eps_high)  # [B, T]
    elif loss_type == "sapo":
        per_token_loss = sapo_token_loss(ratio, adv, *sapo_temperatures)  # [B, T]
    elif loss_type == "vespo":
        if sampling_weights is not None and sampling_weights.shape != mask.shape:
            raise ValueError("loss_type='vespo' folds the sampler's weights into its "
                             "sequence ratio token by token; use a token_* mode.")
        phi = vespo_weights(logp - old_logp, adv, mask, vespo_shape,
                            sampling_weights)  # [B, 1]
        per_token_loss, sampling_weights = -phi * adv * logp, None  # [B, T]
    else:
        per_token_loss = clipped_token_loss(ratio, advantages, epsilon, eps_high,
                                            delta)

    if keep is not None:  # high-entropy tokens, off-policy completions
        per_token_loss = per_token_loss * keep.detach()
    if sampling_weights is not None:
        per_token_loss = per_token_loss * sampling_weights.detach()  # [B, T]

    if beta != 0.0:
        per_token_kl = kl_estimate(logp, ref_logp, kind="k3")  # [B, T]
        if use_bias_correction_kl:
            # same value on-policy; with token ratios, the reverse KL's gradient
            per_token_kl = per_token_kl * ratio  # [B, T]
        per_token_loss = per_token_loss + beta * per_token_kl

    if loss_type in ("grpo", "sapo"):
        loss = aggregate_grpo(per_token_loss, mask) / num_micro_batches
    elif loss_type == "bnpo":
        loss = aggregate_bnpo(per_token_loss, mask) / num_micro_batches
    elif loss_type == "dr_grpo":
        loss = (
            aggregate_dr_grpo(per_token_loss, mask, max_completion_length)
            / num_micro_batches
        )
    elif loss_type in ("dapo", "cispo", "vespo"):
        n = mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = aggregate_dapo(per_token_loss, mask, n)
    else:  # reinforce, luspo: each completion's sum
        loss = aggregate_reinforce(per_token_loss, mask) / num_micro_batches

    with torch.no_grad():
        rho = ratio.detach().expand_as(mask)  # [B, T]
        if loss_type == "cispo":  # capped weights; no token loses its gradient
            high = (rho > eps_high) & (adv > 0)  # [B, T]
            low = torch.zeros_like(high)
        elif loss_type in ("sapo", "vespo"):  # a gate or a weight, no clip
            low = high = torch.zeros_like(rho, dtype=torch.bool)
        else:
            low, high = clipped_tokens(
                rho, advantages, epsilon=epsilon, epsilon_high=eps_high
            )  # [B, T]
        low, high = low.to(mask.dtype), high.to(mask.dtype)
        region = torch.clamp(low + high, max=1.0)
        ratio_max = (
            rho.masked_fill(mask == 0, float("-inf")).max().item()
            if mask.any() else 1.0
        )
        scale = (1.0 if loss_type in ("dapo", "cispo", "vespo")
                 else float(num_micro_batches))
        stats = {
            "policy_loss": loss.detach().item() * scale,
            "kl": (
                _masked_mean(per_token_kl.detach(), mask)
                if beta != 0.0
                else float("nan")
            ),
            "clip_frac_low": _masked_mean(low, mask),
            "clip_frac_high": _masked_mean(high, mask),
            "clip_frac_region": _masked_mean(region, mask),
            "ratio_mean": _masked_mean(rho, mask),
            "ratio_max": ratio_max,
            "num_tokens": mask.sum().item(),
        }
    return loss, stats


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean per-token entropy that an entropy bonus adds to the objective.

    .. math:: \\bar H = \\frac{\\sum_{i,t} m_{i,t} H_{i,t}}{\\sum_{i,t} m_{i,t}},
              \\qquad \\mathcal L \\leftarrow \\mathcal L - c\\, \\bar H / K

    :math:`H_{i,t}` is the entropy of the policy's next-token distribution at token
    :math:`t` of completion :math:`i` (with its gradient), :math:`c` the trainer's
    ``entropy_coef`` and :math:`K` the number of accumulated micro-batches. A token
    mean whatever the ``loss_type``, as in TRL's ``entropy_coef``, so :math:`c` means
    the same for every loss. ``entropy, mask``: ``[B, T]``; returns a scalar.
    """
    mask = mask.to(entropy.dtype)
    return (entropy * mask).sum() / mask.sum().clamp(min=1.0)


def adaptive_entropy_coef(coef: float, entropy: float, target: float, delta: float,
                          coef_min: float, coef_max: float) -> float:
    """Skywork-OR1's adaptive entropy control: the bonus's next coefficient.

    .. math:: c_H \\leftarrow \\begin{cases} \\min(c_H + \\Delta c,\\ c_{\\max})
              & \\bar H \\le H_{\\mathrm{target}} \\\\
              \\max(c_H - \\Delta c,\\ c_{\\min}) & \\text{otherwise} \\end{cases}

    after each optimizer step, with :math:`\\bar H` the step's token-mean entropy
    (over the tokens the bonus averages, :func:`entropy_bonus`). The coefficient
    climbs while the entropy is at or under its target and falls back once it is
    over; the trainer applies it only on steps that follow one at or under the
    target. TRL's ``use_adaptive_entropy``, with its ``entropy_target``,
    ``entropy_coef_delta``, ``entropy_coef_min`` and ``entropy_coef_max``.
    """
    if entropy <= target:
        return min(coef + delta, coef_max)
    return max(coef - delta, coef_min)


def check_entropy_control(coef: float, target: float, delta: float, coef_min: float,
                          coef_max: float) -> None:
    """A clear error for settings :func:`adaptive_entropy_coef` cannot work with."""
    numbers = dict(entropy_coef=coef, entropy_target=target, entropy_coef_delta=delta,
                   entropy_coef_min=coef_min, entropy_coef_max=coef_max)
    for name, value in numbers.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value)
                and value >= 0):
            raise ValueError(f"{name}={value!r}: must be a number >= 0 (TRL's "
                             f"defaults: target 0.2 nats, delta 0.005, range 0 to 1).")
    if coef_min > coef_max:
        raise ValueError(f"entropy_coef_min={coef_min} is above entropy_coef_max="
                         f"{coef_max}: the coefficient would have no room.")
    if delta == 0:
        raise ValueError("entropy_coef_delta=0 with use_adaptive_entropy: the "
                         "coefficient would never move; set a step (TRL: 0.005) or "
                         "turn use_adaptive_entropy off.")
