"""Checkers for chapter 8 (loss variants). Solutions: book/solutions/ch08.md."""
from __future__ import annotations

import math

import torch

from ..advantages import group_advantages
from ..losses import aggregate_bnpo, aggregate_dr_grpo, aggregate_grpo

_AGGREGATES = {
    "grpo": lambda x, m, L: aggregate_grpo(x, m),
    "bnpo": lambda x, m, L: aggregate_bnpo(x, m),
    "dr_grpo": aggregate_dr_grpo,
}

_AGGREGATE_HINTS = {
    "grpo": (" grpo averages each completion over its own tokens, "
             "(x * mask).sum(-1) / mask.sum(-1), then averages the B completions."),
    "bnpo": (" bnpo is one token mean over the batch: (x * mask).sum() / mask.sum();"
             " padded positions must not count."),
    "dr_grpo": (" dr_grpo divides the token sum by the constant B * L_max, not by the "
                "number of real tokens."),
}


def _aggregate_cases():
    g = torch.Generator().manual_seed(8)
    lengths = torch.tensor([4, 12, 1, 7])
    mask = (torch.arange(16) < lengths[:, None]).float()  # [4, 16]
    per_token = torch.randn(4, 16, generator=g)  # [4, 16]
    per_token_padded = per_token.masked_fill(mask == 0, 100.0)  # junk in the padding
    hand = torch.tensor([[1.0, 1.0, 0.0], [3.0, 0.0, 0.0]])  # [2, 3]
    hand_mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    return [(hand, hand_mask, 3), (per_token, mask, 16), (per_token_padded, mask, 16),
            (per_token, mask, 32)]


def check_aggregate(fn) -> bool:
    """Check ``fn(per_token_loss [B, T], mask [B, T], loss_type, L_max) -> scalar``.

    ``loss_type`` is ``"grpo"``, ``"bnpo"`` or ``"dr_grpo"``; the result must equal
    :func:`grpo_lib.losses.aggregate_grpo` / ``aggregate_bnpo`` / ``aggregate_dr_grpo``
    on a hand-made batch (grpo 2, bnpo 5/3, dr_grpo 5/6), on random terms with junk
    in the padding, and with a different ``L_max``.
    """
    for loss_type, reference in _AGGREGATES.items():
        for x, mask, L in _aggregate_cases():
            expected = reference(x, mask, L)
            try:
                got = fn(x.clone(), mask.clone(), loss_type, L)
            except NotImplementedError:
                raise
            except Exception as err:  # noqa: BLE001 - report the learner's error
                raise AssertionError(
                    f"loss_type={loss_type!r}: your function raised "
                    f"{type(err).__name__}: {err}") from None
            got_value = float(got) if not isinstance(got, torch.Tensor) else (
                got.item() if got.numel() == 1 else math.nan)
            if isinstance(got, torch.Tensor) and got.numel() != 1:
                raise AssertionError(
                    f"loss_type={loss_type!r}: expected one number (a 0-d tensor), got "
                    f"a tensor of shape {tuple(got.shape)}. Reduce over both the "
                    f"batch and the token dimension.")
            if not math.isclose(got_value, expected.item(), rel_tol=1e-5,
                                abs_tol=1e-6):
                raise AssertionError(
                    f"loss_type={loss_type!r}, mask row sums "
                    f"{mask.sum(-1).int().tolist()}, L_max={L}: expected "
                    f"{expected.item():.6f}, got {got_value:.6f}."
                    f"{_AGGREGATE_HINTS[loss_type]}")
    print("check_aggregate: grpo, bnpo and dr_grpo agree with grpo_lib.losses "
          "(hand-made batch, junk in the padding, two L_max).")
    return True


def reference_group_push(num_right: int, group_size: int, scale: str) -> float:
    r"""Total advantage size of a binary-reward group, from ``group_advantages``.

    .. math:: \sum_{i=1}^{G} |A_i|, \quad r = (1,\dots,1,0,\dots,0) \text{ with
       } k \text{ ones}
    """
    rewards = [1.0] * num_right + [0.0] * (group_size - num_right)
    return group_advantages(rewards, group_size, scale=scale).abs().sum().item()


def check_group_push(fn) -> bool:
    r"""Check ``fn(num_right, group_size, scale) -> float``: :math:`\sum_i |A_i|`.

    For binary rewards with ``num_right`` ones out of ``group_size``, ``scale`` in
    ``{"group", "none"}``, without calling ``group_advantages``: closed forms
    :math:`2Gp(1-p)` (none) and :math:`2Gp(1-p)/(\sigma + 10^{-4})` with the sample
    std :math:`\sigma = \sqrt{\tfrac{G}{G-1}p(1-p)}` (group). Known values: G = 8,
    k = 4: 4.0 (none) and 7.482 (group); k = 0 or k = G: 0.
    """
    cases = [(k, G) for G in (2, 4, 8, 16) for k in range(0, G + 1)]
    for scale in ("none", "group"):
        for k, G in cases:
            expected = reference_group_push(k, G, scale)
            got = fn(k, G, scale)
            try:
                got = float(got)
            except (TypeError, ValueError):
                raise AssertionError(
                    f"num_right={k}, group_size={G}, scale={scale!r}: expected a "
                    f"number, got {got!r}.") from None
            if math.isclose(got, expected, rel_tol=1e-4, abs_tol=1e-6):
                continue
            p = k / G
            hint = ""
            if scale == "group" and k not in (0, G):
                pop = 2 * G * p * (1 - p) / (math.sqrt(p * (1 - p)) + 1e-4)
                if math.isclose(got, pop, rel_tol=1e-3):
                    hint = (" You used the population std (divide by G); TRL and "
                            "group_advantages use the sample std (divide by G - 1).")
            if k in (0, G) and got != 0:
                hint = " A group whose rewards are all equal has every A_i = 0."
            raise AssertionError(
                f"num_right={k}, group_size={G}, scale={scale!r}: expected "
                f"{expected:.6f}, got {got:.6f}.{hint}")
    print("check_group_push: correct for G in (2, 4, 8, 16), every k, with and "
          "without the std.")
    return True


def _pooled_gap(lengths: torch.Tensor, correct: list[bool]) -> float:
    """mean(len wrong) - mean(len right) over the whole batch (groups ignored): the
    trainer's ``length_wrong - length_correct``, NaN when either kind is missing."""
    from ..trainer import _masked_mean

    return _masked_mean(lengths, correct, False) - _masked_mean(lengths, correct, True)


def _gap_cases():
    yield torch.tensor([4, 10, 6, 20]), [True, False, True, False], 2  # +6, +14 -> +10
    yield torch.tensor([4, 10, 6, 20]), [True, True, False, True], 2  # 1 mixed: -14
    yield torch.tensor([4, 10, 6, 20]), [True] * 4, 2  # none mixed: NaN
    yield torch.tensor([3, 9, 30, 50]), [False, True, False, False], 4  # one group
    g = torch.Generator().manual_seed(84)
    for P, G in ((3, 4), (5, 8), (2, 16)):
        lengths = torch.randint(1, 64, (P * G,), generator=g)
        correct = (torch.rand(P * G, generator=g) < 0.5).tolist()
        yield lengths, correct, G


def check_length_gap_in_group(fn) -> bool:
    r"""Check ``fn(lengths, correct, group_size) -> float``: the length gap in groups.

    ``lengths``: ``[B]`` token counts with ``B = P * group_size`` and groups contiguous;
    ``correct``: ``B`` bools. Over the groups that have at least one right *and* one
    wrong completion, the mean of mean(len wrong) - mean(len right); NaN when no group
    is mixed. The reference is the trainer's ``length_gap_in_group`` metric.
    """
    from ..trainer import _length_gap_in_group

    for lengths, correct, G in _gap_cases():
        expected = _length_gap_in_group(lengths, correct, G)
        where = f"lengths={lengths.tolist()}, correct={correct}, group_size={G}"
        try:
            got = float(fn(lengths.clone(), list(correct), G))
        except (TypeError, ValueError) as err:
            raise AssertionError(f"{where}: expected a number, got an error or a "
                                 f"non-number ({err}).") from None
        if math.isnan(expected):
            if not math.isnan(got):
                raise AssertionError(
                    f"{where}: no group has both right and wrong answers, so there is "
                    f"nothing to compare: expected NaN, got {got:.4f}.")
            continue
        if math.isclose(got, expected, rel_tol=1e-5, abs_tol=1e-5):
            continue
        hint = ""
        pooled = _pooled_gap(lengths, correct)
        if math.isclose(got, pooled, rel_tol=1e-5, abs_tol=1e-5):
            hint = (" That is the pooled gap over the whole batch: compare the right "
                    "and wrong answers inside each group "
                    "(lengths.view(-1, group_size)), then average over the mixed "
                    "groups.")
        elif math.isclose(got, -expected, rel_tol=1e-5, abs_tol=1e-5):
            hint = " The sign is flipped: wrong minus right."
        raise AssertionError(f"{where}: expected {expected:.4f}, got {got:.4f}.{hint}")
    print("check_length_gap_in_group: agrees with the trainer's metric on hand-made "
          "and random batches, NaN when no group is mixed.")
    return True


def check_sequence_log_ratio(fn) -> bool:
    """Check ``fn(logp [B,T], old_logp [B,T], mask [B,T]) -> [B, 1]``: GSPO's
    log-ratio of each completion, the mean of its real tokens' log-ratios (0 for an
    empty completion)."""
    from ..losses import sequence_log_ratio

    g = torch.Generator().manual_seed(5)
    lengths = torch.tensor([3, 6, 1, 0])
    mask = (torch.arange(6) < lengths[:, None]).float()  # [4, 6]
    old = torch.randn(4, 6, generator=g)
    logp = old + 0.3 * torch.randn(4, 6, generator=g)
    expected = sequence_log_ratio(logp, old, mask)  # [4, 1]
    got = fn(logp.clone(), old.clone(), mask.clone())
    got = _per_completion(got, 4)
    if got.shape == expected.shape and torch.allclose(got, expected, atol=1e-6):
        print("check_sequence_log_ratio: correct, padded tokens and an empty "
              "completion included.")
        return True
    delta = (logp - old) * mask
    hint = ""
    if got.shape != expected.shape:
        hint = " Return one value per completion, shape [B, 1]."
    elif torch.isnan(got).any():
        hint = (" An empty completion divides by 0: clamp the token count to at least "
                "1, so its log-ratio is 0.")
    elif torch.allclose(got, delta.sum(-1, keepdim=True), atol=1e-6):
        hint = (" You summed the token log-ratios; GSPO divides by the completion's "
                "length, so long and short completions move on the same scale.")
    elif torch.allclose(got, (logp - old).mean(-1, keepdim=True), atol=1e-6):
        hint = " You averaged over padded positions too: use the mask."
    raise AssertionError(
        f"lengths {lengths.tolist()}: expected {_fmt_col(expected)}, got "
        f"{_fmt_col(got)}.{hint}")


def check_vespo_weights(fn) -> bool:
    """Check ``fn(log_ratio [B,T], advantages [B,1], mask [B,T]) -> [B, 1]``:
    VESPO's phi(w) = w^m e^(nu (1 - w)) of the product w of each completion's
    real token ratios, (m, nu) = (2, 3) for A >= 0 and (3, 2) for A < 0 (TRL's
    k and lambda)."""
    from ..losses import vespo_weights

    g = torch.Generator().manual_seed(6)
    lengths = torch.tensor([5, 2, 8, 3, 6])
    mask = (torch.arange(8) < lengths[:, None]).float()  # [5, 8]
    log_ratio = 0.15 * torch.randn(5, 8, generator=g)  # [5, 8]
    adv = torch.tensor([[1.2], [-0.7], [0.4], [0.0], [-1.5]])  # one A = 0
    expected = vespo_weights(log_ratio, adv, mask)  # [5, 1]
    got = fn(log_ratio.clone(), adv.clone(), mask.clone())
    got = _per_completion(got, 5)
    if got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-5):
        print("check_vespo_weights: correct, both signs, A = 0 and padding included.")
        return True

    def phi(log_w, k_lam):  # k_lam: [B, 2]
        k, lam = k_lam[:, :1], k_lam[:, 1:]
        return torch.exp(lam + k * log_w - lam * log_w.exp())

    shape = torch.where(adv >= 0, torch.tensor([2.0, 3.0]), torch.tensor([3.0, 2.0]))
    log_w = (log_ratio * mask).sum(-1, keepdim=True)
    hint = ""
    if got.shape != expected.shape:
        hint = " Return one weight per completion, shape [B, 1]."
    elif torch.allclose(got, phi(log_w / lengths[:, None], shape), rtol=1e-5):
        hint = (" You took GSPO's geometric mean; VESPO's w is the product of the "
                "token ratios, exp of the sum of their logs.")
    elif torch.allclose(got, phi(log_ratio.sum(-1, keepdim=True), shape), rtol=1e-5):
        hint = " The padded positions counted: multiply the log-ratios by the mask."
    elif torch.allclose(got, phi(log_w, shape.flip(-1)), rtol=1e-5):
        hint = " m and nu are swapped: the power is m (2 for A >= 0), the decay nu."
    elif torch.allclose(got, phi(log_w, torch.where(
            adv > 0, torch.tensor([2.0, 3.0]), torch.tensor([3.0, 2.0]))), rtol=1e-5):
        hint = " A completion with A = 0 takes the A >= 0 shape, (2, 3)."
    elif torch.allclose(got, phi(log_w, shape) * torch.exp(-shape[:, 1:]),
                        rtol=1e-5):
        hint = " phi(1) must be 1: keep the e^nu factor."
    raise AssertionError(
        f"lengths {lengths.tolist()}, advantages {adv.flatten().tolist()}: expected "
        f"{_fmt_col(expected)}, got {_fmt_col(got)}.{hint}")


def _per_completion(got, n: int) -> torch.Tensor:
    """A checked function's answer as a detached tensor, ``[n, 1]`` when it has one
    number per completion (``[n]`` is accepted too); any other shape as it is."""
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"return a torch.Tensor, got {type(got).__name__}.")
    return got.detach().reshape(-1, 1) if got.numel() == n else got.detach()


def _fmt_col(t: torch.Tensor) -> str:
    return str([round(v, 4) for v in t.reshape(-1).tolist()])
