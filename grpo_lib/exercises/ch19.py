"""Checkers for chapter 19 (fast steps). Solutions: book/solutions/ch19.md."""
from __future__ import annotations

import torch

from ..fast_decode import inverse_cdf_token, rotate_half_matrix
from ..losses import sampling_importance_weights
from ..qwen2 import rotate_half


# --------------------------------------------------------- 19.1 rotate_half as a matrix
def check_rotate_half_matrix(fn) -> bool:
    """Check ``fn(d) -> R`` ``[d, d]`` with ``x @ R == rotate_half(x)`` exactly.

    Known value: ``d = 2`` -> ``[[0, 1], [-1, 0]]`` (``[x1, x2] @ R = [-x2, x1]``).
    """
    g = torch.Generator().manual_seed(19)
    for d in (2, 4, 8, 32):
        x = torch.randn(5, d, generator=g)
        R = fn(d)
        if not isinstance(R, torch.Tensor) or R.shape != (d, d):
            raise AssertionError(f"d = {d}: expected a [d, d] tensor, got {R!r:.60}.")
        got, expected = x @ R.float(), rotate_half(x)
        if torch.equal(got, expected):
            continue
        hint = ""
        if torch.equal(got, -expected):
            hint = (" You rotate the other way: [x1, x2] -> [x2, -x1]. The minus sign "
                    "belongs to the first half of the output.")
        elif torch.equal(x @ R.float().t(), expected):
            hint = " That is R transposed: row k of R says where input k goes."
        elif torch.allclose(got, expected, atol=1e-5):
            hint = (" Close but not exact: use only 0, 1 and -1, so every output is "
                    "one input, unrounded.")
        raise AssertionError(f"d = {d}: x @ R = {got[0, :4].tolist()} for x = "
                             f"{x[0, :4].tolist()}, expected "
                             f"{expected[0, :4].tolist()}.{hint}")
    assert torch.equal(fn(2).float(), rotate_half_matrix(2))
    print("check_rotate_half_matrix: exact for d = 2, 4, 8 and 32.")
    return True


# ------------------------------------------------------------ 19.2 inverse-CDF sampling
def reference_draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token ``min{v : F_v > u}`` of each row, ``F`` the cumulative sum of
    ``probs`` ``[B, V]``, for uniform numbers ``u`` ``[B]`` in ``[0, 1)``."""
    return inverse_cdf_token(probs.cumsum(-1), u)


_DRAW_CASES = [
    ("p = [0.5, 0.3, 0.2], u = 0.1, 0.6, 0.9",
     torch.tensor([[0.5, 0.3, 0.2]] * 3), torch.tensor([0.1, 0.6, 0.9])),
    ("a token of probability 0 first, u = 0", torch.tensor([[0.0, 0.5, 0.5]]),
     torch.tensor([0.0])),
    ("u exactly on a boundary, F_0 = 0.5", torch.tensor([[0.5, 0.0, 0.5]]),
     torch.tensor([0.5])),
    ("u just below 1", torch.tensor([[0.25, 0.25, 0.5]]), torch.tensor([0.999])),
]


def check_draw(fn) -> bool:
    """Check ``fn(probs [B, V], u [B]) -> tokens [B]``: inverse-CDF sampling, the
    smallest ``v`` with ``F_v > u``.

    Known value: ``p = [0.5, 0.3, 0.2]``, ``u = 0.6`` -> token 1 (``F = [0.5, 0.8,
    1.0]``, and 0.8 is the first value above 0.6).
    """
    for label, probs, u in _DRAW_CASES:
        expected = reference_draw(probs, u)
        got = fn(probs.clone(), u.clone())
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            raise AssertionError(f"{label}: expected a tensor of shape "
                                 f"{tuple(expected.shape)}, got {got!r:.60}.")
        if torch.equal(got.long(), expected):
            continue
        hint = ""
        chosen = got.long().clamp(0, probs.shape[1] - 1)[:, None]
        if (probs.gather(1, chosen) == 0).any():
            hint = (" You chose a token of probability 0: with F_v >= u a u that falls "
                    "on a boundary (or u = 0) picks a token whose interval is empty. "
                    "The condition is F_v > u.")
        raise AssertionError(f"{label}: expected {expected.tolist()}, got "
                             f"{got.tolist()}.{hint}")
    print("check_draw: right on the intervals, on their boundaries and at u = 0.")
    return True


# ------------------------------------------------- 19.3 sequence-level masked weights
_WEIGHT_CASES = [
    ("ratios [2, 0.5, 1] and [4, 2, padding]",
     torch.tensor([[0.5, 0.2, 0.9], [0.8, 0.8, 0.3]]).log(),
     torch.tensor([[0.25, 0.4, 0.9], [0.2, 0.4, 0.01]]).log(),
     torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]), 3.0),
    ("ratio 1.5 and then padding", torch.tensor([[0.6, 0.5, 0.9]]).log(),
     torch.tensor([[0.4, 0.5, 0.1]]).log(), torch.tensor([[1.0, 1.0, 0.0]]), 3.0),
    ("three sequences near 1",
     torch.tensor([[-1.0, -2.0], [-0.5, -0.1], [-3.0, -1.0]]),
     torch.tensor([[-1.1, -2.05], [-0.4, -0.1], [-2.0, -1.0]]),
     torch.ones(3, 2), 2.0),
]


def check_sequence_mask_weights(fn) -> bool:
    """Check ``fn(trainer_logp, sampler_logp, mask, clip_max) -> [B, 1]``: one weight
    per completion, ``exp`` of the summed log-prob gap over its real tokens, set to 0
    when above ``clip_max`` (TRL's default ``sequence_mask``).

    Known value: token ratios ``[2, 0.5, 1]`` -> 1.0; ``[4, 2]`` with ``clip_max = 3``
    -> 0.0.
    """
    for label, trainer, sampler, mask, clip_max in _WEIGHT_CASES:
        expected = sampling_importance_weights(trainer, sampler, mask, "sequence_mask",
                                               clip_max=clip_max)
        got = fn(trainer.clone(), sampler.clone(), mask.clone(), clip_max)
        if not isinstance(got, torch.Tensor) or got.numel() != expected.numel():
            raise AssertionError(f"{label}: expected one weight per completion, shape "
                                 f"{tuple(expected.shape)}, got {got!r:.60}.")
        got = got.reshape(expected.shape).float()
        if torch.allclose(got, expected, atol=1e-5):
            continue
        hint = ""
        unmasked = ((trainer - sampler).sum(-1, keepdim=True)).exp()
        unmasked = unmasked.masked_fill(unmasked > clip_max, 0.0)
        truncated = sampling_importance_weights(trainer, sampler, mask,
                                                "sequence_truncate", clip_max=clip_max)
        if torch.allclose(got, unmasked, atol=1e-5):
            hint = (" The padding after a completion's end counts in your sum: "
                    "multiply the gap by the mask first.")
        elif torch.allclose(got, truncated, atol=1e-5):
            hint = (" You clipped the weight to clip_max; the mask mode drops the "
                    "completion instead (weight 0).")
        raise AssertionError(f"{label}: expected {expected.flatten().tolist()}, got "
                             f"{got.flatten().tolist()}.{hint}")
    print("check_sequence_mask_weights: one weight per completion, padding left out, "
          "0 above the bound.")
    return True
