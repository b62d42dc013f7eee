"""Checkers for chapter 12 (rejection sampling and SFT stage 2).
Solutions: book/solutions/ch12.md."""
from __future__ import annotations

import math
from numbers import Integral

from ..rejection import normalise_completion


# ------------------------------------------------------------------ 12.1 samples
def reference_samples_needed(p: float, target: float) -> int:
    """The smallest ``k`` with :math:`1 - (1 - p)^k \\ge` ``target``: how many samples
    a prompt needs so that at least one of them is correct with probability
    ``target``, when each is correct with probability ``p`` (independently)."""
    k, miss = 1, 1.0 - p
    while 1.0 - miss ** k < target:
        k += 1
    return k


_SAMPLE_CASES = [(0.5, 0.99), (0.2, 0.99), (0.9, 0.999), (0.05, 0.9), (1.0, 0.99),
                 (0.3, 0.5), (0.6, 0.95), (0.1, 0.999)]


def check_samples_needed(fn) -> bool:
    """Check ``fn(p, target) -> int``: the smallest k with 1 - (1 - p)^k >= target.

    Known values: ``p = 0.5, target = 0.99 -> 7`` (``1 - 0.5^7 = 0.992``);
    ``p = 1 -> 1``.
    """
    for p, target in _SAMPLE_CASES:
        expected = reference_samples_needed(p, target)
        got = fn(p, target)
        if isinstance(got, bool) or not isinstance(got, Integral):
            raise AssertionError(
                f"p={p}, target={target}: expected a whole number of samples, got "
                f"{got!r}. Round the way that reaches the target.")
        if got == expected:
            continue
        hint = ""
        if got == expected - 1:
            hint = (f" With k={got}, 1 - (1 - p)^k = {1 - (1 - p) ** got:.4f} is "
                    f"still below the target: round up, not down.")
        elif got > 0 and math.isclose(1 - (1 - p) ** got, target, abs_tol=0.02):
            hint = " Check the last k, the first one that reaches the target."
        raise AssertionError(
            f"p={p}, target={target}: expected k={expected}, got {got}.{hint}")
    print("check_samples_needed: the smallest k on every case.")
    return True


# ------------------------------------------------------------------ 12.2 dedup
def reference_dedup_mask(prompt_index, completions) -> list[bool]:
    """True for the first copy of each (prompt, normalised completion), False for a
    repeat; the normalisation is :func:`grpo_lib.rejection.normalise_completion`
    (whitespace runs as one space, ends stripped, case folded)."""
    seen, keep = set(), []
    for p, text in zip(prompt_index, completions):
        key = (p, normalise_completion(text))
        keep.append(key not in seen)
        seen.add(key)
    return keep


_T = "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>"
_DEDUP_CASES = [
    ("exact repeats of one prompt", [0, 0, 0, 1], [_T, _T, _T.replace("14", "20"), _T]),
    ("the same text for two prompts", [0, 1, 1, 2], [_T, _T, _T, _T]),
    ("whitespace and case", [0, 0, 0, 0],
     [_T, _T.replace(" </think> ", " </think>\n"), "  " + _T.upper(), _T + "."]),
    ("nothing repeats", [0, 1, 2], ["a", "b", "c"]),
]


def check_dedup_mask(fn) -> bool:
    """Check ``fn(prompt_index: list[int], completions: list[str]) -> list[bool]``.

    True keeps the first copy of each (prompt, normalised completion); the same text
    for two different prompts is kept for both.
    """
    for name, prompts, texts in _DEDUP_CASES:
        expected = reference_dedup_mask(prompts, texts)
        raw = fn(list(prompts), list(texts))
        try:
            got = [bool(x) for x in raw]
        except TypeError:
            raise AssertionError(f"{name}: expected a list of bools, got {raw!r}.") \
                from None
        if got == expected:
            continue
        hint = ""
        across_prompts = reference_dedup_mask([0] * len(texts), texts)
        raw_text = [(p, t) not in list(zip(prompts, texts))[:i]
                    for i, (p, t) in enumerate(zip(prompts, texts))]
        if got == raw_text:
            hint = (" Some copies differ only in spacing or case; compare the texts "
                    "after normalising them.")
        elif got == across_prompts:
            hint = (" A repeat is a repeat within one prompt: the same good answer "
                    "to two different prompts is two samples.")
        elif got == [not x for x in expected]:
            hint = " True means keep: the first copy is kept, the repeats dropped."
        raise AssertionError(
            f"{name}: prompts {prompts}: expected {expected}, got {got}.{hint}")
    print("check_dedup_mask: one copy per prompt and normalised text.")
    return True


# ------------------------------------------------------------------ 12.3 yields
def reference_sequential_yields(masks: dict) -> list[int]:
    """Candidates left after each filter applied in order: ``[n, n_1, n_2, ...]`` with
    :math:`n_j = \\#\\{i : m_1[i] \\wedge \\dots \\wedge m_j[i]\\}` (a candidate must
    pass every filter so far)."""
    names = list(masks)
    n = len(masks[names[0]]) if names else 0
    alive = [True] * n
    counts = [n]
    for name in names:
        alive = [a and bool(m) for a, m in zip(alive, masks[name])]
        counts.append(sum(alive))
    return counts


_MASK_CASES = [
    {"correct": [1, 1, 0, 1, 0, 1], "formatted": [1, 0, 1, 1, 0, 1],
     "single_language": [1, 1, 1, 0, 1, 1]},
    {"correct": [0, 0, 1, 1], "not_truncated": [1, 1, 0, 1]},
    {"correct": [1, 1, 1, 1, 1], "formatted": [0, 1, 1, 1, 1],
     "non_repetitive": [1, 0, 1, 1, 0], "single_language": [1, 1, 0, 1, 1]},
]


def check_sequential_yields(fn) -> bool:
    """Check ``fn(masks: dict[str, list[bool]]) -> list[int]``.

    ``masks`` maps each filter, in order, to its verdict on every candidate; return
    the number of candidates left at the start and after each filter, ``len(masks)
    + 1`` counts. ``{"correct": [1, 1, 0], "formatted": [1, 0, 1]} -> [3, 2, 1]``.
    """
    for masks in _MASK_CASES:
        masks = {k: [bool(x) for x in v] for k, v in masks.items()}
        expected = reference_sequential_yields(masks)
        raw = fn({k: list(v) for k, v in masks.items()})
        try:
            got = [int(x) for x in raw]
        except (TypeError, ValueError):
            raise AssertionError(f"expected a list of counts, got {raw!r}.") from None
        if got == expected:
            continue
        alone = [len(next(iter(masks.values())))] + [sum(m) for m in masks.values()]
        hint = ""
        if got == alone:
            hint = (" You counted each filter on all candidates; each filter sees only "
                    "the candidates the earlier ones kept.")
        elif got == expected[1:]:
            hint = " The first count is the number of candidates before any filter."
        raise AssertionError(
            f"filters {list(masks)}: expected {expected}, got {got}.{hint}")
    print("check_sequential_yields: the counts of the yield table, stage by stage.")
    return True
