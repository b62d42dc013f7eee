"""Checkers for chapter 4 (the causal-LM shift). Solutions: book/solutions/ch04.md."""
from __future__ import annotations

import torch


def _fmt(t: torch.Tensor) -> str:
    return str(torch.round(t.detach().double(), decimals=4).tolist())


def _reference_completion_logprobs(logits, input_ids, prompt_len):
    logp = logits.log_softmax(-1)  # [B, P+C, V]
    targets = input_ids[:, prompt_len:, None]  # [B, C, 1]
    return logp[:, prompt_len - 1:-1].gather(-1, targets)[..., 0]  # [B, C]


def check_completion_logprobs(fn) -> bool:
    """Check ``fn(logits [B, P+C, V], input_ids [B, P+C], prompt_len) -> [B, C]``."""
    g = torch.Generator().manual_seed(0)
    B, P, C, V = 2, 3, 4, 7
    logits = torch.randn(B, P + C, V, generator=g, dtype=torch.float64)
    input_ids = torch.randint(0, V, (B, P + C), generator=g)
    expected = _reference_completion_logprobs(logits, input_ids, P)  # [B, C]
    got = fn(logits.clone(), input_ids.clone(), P)
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"return a tensor, got {type(got).__name__}.")
    if got.shape != expected.shape:
        raise AssertionError(
            f"shape: expected {tuple(expected.shape)} = [B, C] (one log-prob per "
            f"completion token; P={P}, C={C}), got {tuple(got.shape)}."
        )
    if torch.allclose(got.double(), expected, atol=1e-6):
        print("check_completion_logprobs: correct, logits[:, P-1:-1] predict "
              "ids[:, P:].")
        return True
    logp = logits.log_softmax(-1)
    hint = ""
    no_shift = logp[:, P:].gather(-1, input_ids[:, P:, None])[..., 0]
    if torch.allclose(got.double(), no_shift, atol=1e-6):
        hint = (" You read each token's log-prob from its own position "
                "(logits[:, P:]); the logit at t predicts the token at t + 1.")
    elif torch.allclose(got.double(), logits[:, P - 1:-1].gather(
            -1, input_ids[:, P:, None])[..., 0], atol=1e-6):
        hint = " These are raw logits: take log_softmax over the vocabulary first."
    raise AssertionError(f"expected {_fmt(expected)}\n got      {_fmt(got)}.{hint}")


def check_position_ids(fn) -> bool:
    """Check ``fn(attention_mask [B, L]) -> position_ids [B, L]`` for left padding.

    Only positions of real tokens are checked (padding is masked out anyway).
    """
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    expected = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 0, 0, 0]])
    got = fn(mask.clone())
    if not isinstance(got, torch.Tensor) or got.shape != mask.shape:
        raise AssertionError(
            f"return a tensor of shape {tuple(mask.shape)} (one position per token), "
            f"got {getattr(got, 'shape', type(got))}.")
    real = mask.bool()
    if torch.equal(got.long()[real], expected[real]):
        print("check_position_ids: correct, the first real token of every row is at "
              "0.")
        return True
    hint = ""
    if torch.equal(got.long()[real], torch.arange(5).expand(3, 5)[real]):
        hint = (" These count the padding: the first real token of a left-padded row "
                "must be at position 0. Count only the real tokens seen so far.")
    elif torch.equal(got.long()[real], mask.cumsum(-1)[real]):
        hint = " Off by one: the first real token is at position 0, not 1."
    raise AssertionError(f"attention_mask {mask.tolist()}:\n expected (real tokens) "
                         f"{expected.tolist()}\n got {got.tolist()}.{hint}")


def check_sft_labels(fn) -> bool:
    """Check ``fn(input_ids [L], mask [L]) -> labels [L]`` for a Hugging Face causal LM.

    HF's loss shifts the labels itself (``logits[:-1]`` against ``labels[1:]``), so the
    labels are the input ids with -100 wherever the mask is 0 — no manual shift.
    """
    ids = torch.tensor([5, 9, 2, 7, 7, 3, 1, 4])
    mask = torch.tensor([0, 0, 0, 1, 1, 1, 0, 0])
    expected = torch.tensor([-100, -100, -100, 7, 7, 3, -100, -100])
    got = fn(ids.clone(), mask.clone())
    if not isinstance(got, torch.Tensor) or got.shape != ids.shape:
        raise AssertionError(
            f"return labels of the same shape as input_ids {tuple(ids.shape)}, got "
            f"{getattr(got, 'shape', type(got))}. HF shifts inside its loss; do not "
            f"drop a position.")
    if torch.equal(got.long(), expected):
        print("check_sft_labels: correct, labels = ids where mask else -100 (HF "
              "shifts).")
        return True
    hint = ""
    kept = (got.long() != -100).long()
    earlier = torch.cat([mask[1:], mask[:1] * 0])  # the mask moved one step left
    later = torch.cat([mask[:1] * 0, mask[:-1]])  # ... or right
    if torch.equal(kept, earlier) or torch.equal(kept, later):
        hint = (" You shifted the labels by one; the model's loss already compares "
                "logits[:-1] with labels[1:], so shifting here shifts twice.")
    elif torch.equal(got.long(), torch.where(mask.bool(), -100, ids)):
        hint = " The mask is inverted: keep the ids where mask == 1."
    raise AssertionError(f"ids {ids.tolist()}, mask {mask.tolist()}:\n expected "
                         f"{expected.tolist()}\n got      {got.tolist()}.{hint}")
