"""Checkers for chapter 6 (rollouts). Solutions: book/solutions/ch06.md."""
from __future__ import annotations

import torch

from ..sampling import top_p_filter


def _kept(logits: torch.Tensor) -> list:
    return torch.isfinite(logits).int().tolist()


def check_top_p_filter(fn) -> bool:
    """Check ``fn(logits [B, V], top_p) -> logits [B, V]`` with removed tokens at -inf.

    Compared with :func:`grpo_lib.sampling.top_p_filter` on hand-made rows (the nucleus
    boundary, shuffled vocabularies, top_p = 1, a tiny top_p) and on random logits.
    """
    hand = torch.log(torch.tensor([[0.5, 0.3, 0.2, 1e-9],
                                   [0.22, 0.5, 0.1, 0.18],
                                   [0.05, 0.05, 0.1, 0.8]]))
    g = torch.Generator().manual_seed(0)
    cases = [(hand, p) for p in (0.45, 0.55, 0.75, 0.81, 1.0, 1e-4)]
    cases += [(torch.randn(8, 40, generator=g) * 2, p) for p in (0.3, 0.9)]
    for logits, p in cases:
        expected = top_p_filter(logits, p)
        got = fn(logits.clone(), p)
        if not isinstance(got, torch.Tensor) or got.shape != logits.shape:
            shape = (tuple(got.shape) if isinstance(got, torch.Tensor)
                     else type(got).__name__)
            raise AssertionError(
                f"top_p={p}: expected a tensor of shape {tuple(logits.shape)} (the "
                f"filtered logits, same shape as the input), got {shape}."
            )
        kept_ok = torch.equal(torch.isfinite(got), torch.isfinite(expected))
        values_ok = torch.equal(got[torch.isfinite(got)], logits[torch.isfinite(got)])
        if kept_ok and values_ok:
            continue
        hint = ""
        differs = (torch.isfinite(got) != torch.isfinite(expected)).any(-1)
        differs |= (torch.where(torch.isfinite(got), got, 0.0)
                    != torch.where(torch.isfinite(got), logits, 0.0)).any(-1)
        row = int(differs.nonzero()[0])
        n_got, n_exp = int(torch.isfinite(got[row]).sum()), int(
            torch.isfinite(expected[row]).sum())
        if not kept_ok and n_got == 0:
            hint = (" Every token was removed: the most likely token must always stay "
                    "(keep a token while the mass *before* it is below top_p).")
        elif not kept_ok and n_got == n_exp - 1:
            hint = (" You drop one token too many: the token whose probability "
                    "crosses top_p stays (look at the mass *before* each token).")
        elif not kept_ok:
            hint = (" Sort by probability (descending), take the cumulative sum of the "
                    "softmax, and scatter the decision back to vocabulary order.")
        elif not values_ok:
            hint = (" Kept tokens must keep their original logits (only set others to "
                    "-inf).")
        raise AssertionError(
            f"top_p={p}, probabilities "
            f"{[round(v, 3) for v in logits[row].softmax(-1).tolist()[:8]]}:\n"
            f" expected kept {_kept(expected[row])[:8]}\n got kept      "
            f"{_kept(got[row])[:8]}.{hint}"
        )
    print("check_top_p_filter: correct on the nucleus boundary, shuffled rows, "
          "top_p = 1 and random logits.")
    return True


def reference_completion_mask(completion_ids: torch.Tensor, stop_ids) -> torch.Tensor:
    """1 up to and including the first stop token of each row, 0 after. ``[B, C]``"""
    is_stop = torch.isin(completion_ids, torch.as_tensor(list(stop_ids)))  # [B, C]
    stops_before = is_stop.long().cumsum(dim=-1) - is_stop.long()  # [B, C]
    return (stops_before == 0).long()


def check_completion_mask(fn) -> bool:
    """Check ``fn(completion_ids [B, C], stop_ids) -> mask [B, C]`` (ints 0/1)."""
    ids = torch.tensor([
        [5, 6, 7, 2, 0, 0],   # stops at column 3
        [5, 2, 0, 0, 0, 0],   # stops at column 1
        [5, 6, 7, 8, 9, 4],   # never stops: truncated
        [2, 0, 0, 0, 0, 0],   # stops at once
        [5, 6, 1, 7, 2, 0],   # a second stop id (1) comes first
    ])
    stop_ids = [1, 2]
    expected = reference_completion_mask(ids, stop_ids)
    got = fn(ids.clone(), stop_ids)
    if not isinstance(got, torch.Tensor) or got.shape != ids.shape:
        shape = (tuple(got.shape) if isinstance(got, torch.Tensor)
                 else type(got).__name__)
        raise AssertionError(
            f"expected a tensor of shape {tuple(ids.shape)}, got {shape}.")
    if torch.equal(got.long(), expected):
        print("check_completion_mask: correct (stop token included, truncated rows "
              "all ones, several stop ids).")
        return True
    bad = int((got.long() != expected).any(-1).nonzero()[0])
    hint = ""
    if got.long()[bad].sum() == expected[bad].sum() - 1:
        hint = (" The stop token itself must be inside the mask: the model is trained "
                "to emit it, so its log-probability counts.")
    elif got.long()[bad].sum() == 0:
        hint = " A row without a stop token (truncated) keeps every token."
    raise AssertionError(
        f"row {bad}: ids {ids[bad].tolist()} with stop ids {stop_ids}:\n"
        f" expected {expected[bad].tolist()}\n"
        f" got      {got.long()[bad].tolist()}.{hint}"
    )
