"""Checkers for chapter 7 (the full loop). Solutions: book/solutions/ch07.md."""
from __future__ import annotations

import math
from numbers import Integral

import pandas as pd
import torch

from ..advantages import group_advantages
from ..losses import policy_loss


def reference_grpo_loss(logp: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor,
                        G: int) -> torch.Tensor:
    """On-policy GRPO loss from per-token log-probs and rewards (the library's path).

    .. math::

        A_i = \\frac{r_i - \\operatorname{mean}(\\mathbf r_g)}
                    {\\operatorname{std}(\\mathbf r_g) + 10^{-4}},\\qquad
        \\mathcal L = -\\frac1B \\sum_i \\frac1{|o_i|} \\sum_t \\rho_{i,t} A_i,\\quad
        \\rho_{i,t} = e^{\\log\\pi_{i,t} - \\operatorname{sg}(\\log\\pi_{i,t})}

    ``logp`` ``[B, C]``, ``rewards`` ``[B]`` (contiguous groups of ``G``), ``mask``
    ``[B, C]``; returns a scalar.
    """
    advantages = group_advantages(rewards, G)  # [B]
    loss, _ = policy_loss(logp, None, advantages, mask, loss_type="grpo")
    return loss


def _loss_cases():
    g = torch.Generator().manual_seed(7)
    cases = []
    # hand case: one group of 4 with R1-Zero rewards, different lengths
    logp = -torch.rand(4, 5, generator=g) * 2  # [4, 5]
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0],
                         [1, 1, 1, 1, 0]], dtype=torch.float32)
    cases.append(("one group, rewards [1.1, 0.1, 1.0, 0.1]", logp, mask,
                  torch.tensor([1.1, 0.1, 1.0, 0.1]), 4))
    # two groups, the second with zero variance
    logp = -torch.rand(6, 4, generator=g) * 2
    mask = (torch.rand(6, 4, generator=g) > 0.3).float()
    mask[:, 0] = 1.0
    cases.append(("two groups of 3, the second all equal", logp, mask,
                  torch.tensor([1.0, 0.0, 0.0, 1.1, 1.1, 1.1]), 3))
    # random batch
    logp = -torch.rand(8, 6, generator=g) * 3
    mask = (torch.rand(8, 6, generator=g) > 0.4).float()
    mask[:, 0] = 1.0
    cases.append(("random batch, 4 groups of 2", logp, mask,
                  torch.randint(0, 2, (8,), generator=g).float() * 1.0 + 0.1 *
                  torch.randint(0, 2, (8,), generator=g).float(), 2))
    return cases


def check_grpo_loss(fn) -> bool:
    """Check ``fn(logp [B, C], rewards [B], mask [B, C], G) -> scalar loss``.

    The value and the gradient with respect to ``logp`` must match
    :func:`reference_grpo_loss` (``group_advantages`` then ``policy_loss``) to 1e-5.
    """
    for name, logp, mask, rewards, G in _loss_cases():
        ref_in = logp.clone().requires_grad_(True)
        expected = reference_grpo_loss(ref_in, rewards.clone(), mask.clone(), G)
        expected.backward()
        mine = logp.clone().requires_grad_(True)
        got = fn(mine, rewards.clone(), mask.clone(), G)
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            kind = (tuple(got.shape) if isinstance(got, torch.Tensor)
                    else type(got).__name__)
            raise AssertionError(
                f"{name}: expected a scalar tensor (the loss), got {kind}.")
        if not got.requires_grad:
            raise AssertionError(
                f"{name}: the loss has no gradient. Keep logp in the graph: the ratio "
                f"is exp(logp - logp.detach()), which is 1 but has gradient d logp."
            )
        if not math.isclose(got.item(), expected.item(), abs_tol=1e-5):
            raise AssertionError(
                f"{name}: loss expected {expected.item():.6f}, got {got.item():.6f}. "
                f"On-policy the value is -mean_i(A_i) over completions (about 0); a "
                f"different value usually means a wrong mean (over all tokens instead "
                f"of per completion) or advantages not normalised per group."
            )
        got.backward()
        if mine.grad is None:
            raise AssertionError(f"{name}: no gradient reached logp.")
        if not torch.allclose(mine.grad, ref_in.grad, atol=1e-5):
            row = int((mine.grad - ref_in.grad).abs().amax(1).argmax())
            hint = ""
            if torch.allclose(mine.grad * mask, ref_in.grad, atol=1e-5):
                hint = " Padding tokens (mask 0) must get gradient 0: multiply by mask."
            elif torch.allclose(mine.grad, -ref_in.grad, atol=1e-5):
                hint = " The sign is flipped: the loss is MINUS the surrogate."
            else:
                hint = (" Each completion's tokens are averaged over its own length "
                        "(mask.sum(1)), then the completions are averaged; the std is "
                        "the sample std (unbiased) of each group plus 1e-4.")
            raise AssertionError(
                f"{name}: gradient of row {row} expected "
                f"{[round(v, 5) for v in ref_in.grad[row].tolist()]}, got "
                f"{[round(v, 5) for v in mine.grad[row].tolist()]}.{hint}"
            )
    print("check_grpo_loss: value and gradient match the library on 3 batches "
          "(different lengths, a zero-variance group, random rewards).")
    return True


def reference_first_step_above(metrics: pd.DataFrame, column: str,
                               threshold: float) -> int | None:
    """The first ``step`` at which ``metrics[column] > threshold``, else ``None``."""
    above = metrics[metrics[column] > threshold]
    return None if above.empty else int(above["step"].min())


def _metric_cases():
    base = pd.DataFrame({"step": [10, 20, 30, 40, 50, 60],
                         "zero_std_frac": [0.0, 0.25, 0.5, 0.5625, 0.4, 0.75],
                         "accuracy": [0.5, 0.6, 0.7, 0.8, 0.85, 0.9]})
    return [
        ("zero_std_frac > 0.5 (0.5 itself does not count)", base, "zero_std_frac", 0.5),
        ("accuracy > 0.75", base, "accuracy", 0.75),
        ("never above", base, "zero_std_frac", 0.9),
        ("steps starting at 110 (a resumed run)",
         base.assign(step=base.step + 100), "zero_std_frac", 0.3),
        ("rows out of order", base.iloc[::-1].reset_index(drop=True),
         "zero_std_frac", 0.5),
    ]


def check_first_step_above(fn) -> bool:
    """Check ``fn(metrics, column, threshold) -> int | None`` on small metric tables."""
    for name, frame, column, threshold in _metric_cases():
        expected = reference_first_step_above(frame, column, threshold)
        got = fn(frame.copy(), column, threshold)
        if expected is None:
            if got is not None:
                raise AssertionError(
                    f"{name}: no row has {column} > {threshold}, so expected None, "
                    f"got {got!r}."
                )
            continue
        if got is None or isinstance(got, bool) or not isinstance(got, Integral):
            raise AssertionError(
                f"{name}: expected the step number {expected} (an int), got {got!r}."
            )
        if int(got) != expected:
            hint = ""
            if frame.index[frame[column] > threshold].min() == got:
                hint = " That is the row index; return the value of the 'step' column."
            elif frame[frame[column] >= threshold]["step"].min() == got:
                hint = " Use > (strictly greater), not >=."
            elif frame[frame[column] > threshold]["step"].iloc[0] == got:
                hint = " The rows are not sorted by step: take the smallest step."
            raise AssertionError(
                f"{name}: expected step {expected}, got {got}.{hint}\n"
                f"{frame.to_string()}"
            )
    print("check_first_step_above: correct (strict >, step column not row index, "
          "unsorted rows, never above -> None).")
    return True
