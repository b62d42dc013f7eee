"""Checkers for chapter 1's exercises (groups, rewards and advantages).

Each ``check_*`` takes the learner's function, runs it on cases with known answers and
raises ``AssertionError`` naming the input, the expected value and what came back; on
success it prints one line and returns True. Solutions: ``book/solutions/ch01.md``.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ..advantages import group_advantages

# (rewards, group_size) cases shared by the checkers: chapter 1's group for 2 + 3 * 4,
# all-equal groups, G = 2, negative and large rewards, two groups in one batch.
_CASES: list[tuple[list[float], int]] = [
    ([0.1, 1.1, 1.0, 0.1], 4),
    ([1.0, 1.0, 1.0, 1.0], 4),
    ([0.0, 1.0], 2),
    ([-2.0, 0.5, 3.0, 0.5, 0.5, -1.0], 6),
    ([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0], 8),
    ([5.0, 5.0, 5.0, 5.0, 0.0, 1.0, 1.0, 0.0], 4),
]


def _as_floats(value, what: str, expected_len: int) -> np.ndarray:
    """The learner's return value as a float array, or an AssertionError saying why."""
    try:
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        array = np.asarray(value, dtype=float).reshape(-1)
    except (TypeError, ValueError) as err:
        raise AssertionError(
            f"{what} should return a list (or array/tensor) of numbers, got "
            f"{type(value).__name__}: {value!r} ({err}).") from None
    if array.size != expected_len:
        raise AssertionError(
            f"{what} returned {array.size} values, expected {expected_len} (one per "
            f"reward): got {array.tolist()}.")
    return array


def check_group_advantages(fn: Callable[..., Sequence[float]]) -> bool:
    """Check ``fn(rewards, std="sample", eps=1e-4)`` — the advantages of ONE group.

    Expected:
    :math:`\\hat A_i = (r_i - \\bar r) / (\\sigma_r + \\epsilon_{\\mathrm{std}})` with
    ``eps`` :math:`= \\epsilon_{\\mathrm{std}}` and :math:`\\sigma_r` the sample std
    (divide by ``G - 1``) for ``std="sample"``, the population std (divide by ``G``) for
    ``std="population"``; a group whose rewards are all equal gets zeros.
    """
    for rewards, group_size in _CASES:
        if len(rewards) != group_size:
            continue  # single groups only
        for std in ("sample", "population"):
            for eps in (1e-4, 0.5):
                if eps == 0.5 and len(set(rewards)) == 1:
                    continue
                expected = group_advantages(rewards, group_size, std=std, eps=eps)
                expected = expected.double().numpy()
                call = f"fn({rewards}, std={std!r}, eps={eps})"
                got = _as_floats(fn(list(rewards), std=std, eps=eps), call,
                                 len(rewards))
                if not np.all(np.isfinite(got)):
                    raise AssertionError(
                        f"{call} returned non-finite values {got.tolist()}. When "
                        f"all rewards are equal the std is 0: the eps in the "
                        f"denominator (and a numerator of exactly 0) keeps the result "
                        f"at 0.")
                if not np.allclose(got, expected, atol=1e-4):
                    hint = ""
                    ratio = got / np.where(expected == 0, np.nan, expected)
                    if np.nanstd(ratio) < 1e-3 and np.isfinite(np.nanmean(ratio)):
                        hint = (f" Your values are {np.nanmean(ratio):.4f} times "
                                f"the expected ones: check which std (divide by G or "
                                f"G - 1) and where eps goes.")
                    raise AssertionError(
                        f"{call}: expected {np.round(expected, 4).tolist()}, got "
                        f"{np.round(got, 4).tolist()}.{hint}")
    print("check_group_advantages: all cases pass (both std conventions, equal "
          "rewards, G = 2 and larger groups).")
    return True


def check_informative_groups(
        fn: Callable[[Sequence[float], int], Sequence[bool]]) -> bool:
    """Check ``fn(rewards, group_size)`` -> one bool per group: does it teach anything?

    A group teaches something when its rewards are not all equal (then some advantage is
    non-zero); groups are contiguous blocks of ``group_size`` rewards. (Chapter 9's
    checker of the same name wants the indices of those groups instead.)
    """
    for rewards, group_size in _CASES + [([0.3] * 6, 2), ([0.0, 0.0, 1e-9, 0.0], 2)]:
        groups = np.asarray(rewards, dtype=float).reshape(-1, group_size)
        expected = [bool(np.any(row != row[0])) for row in groups]
        call = f"fn({rewards}, group_size={group_size})"
        raw = fn(list(rewards), group_size)
        try:
            got = [bool(x) for x in raw]
        except TypeError:
            raise AssertionError(f"{call} should return a list of bools (one per "
                                 f"group), got {raw!r}.") from None
        if got != expected:
            hint = " A group is informative when its rewards are not all equal."
            if not all(isinstance(x, (bool, np.bool_)) for x in raw):
                hint = (f" You returned {list(raw)!r}: return one bool per group "
                        f"(True = informative), not the indices of the informative "
                        f"groups.")
            raise AssertionError(
                f"{call}: expected {expected} (one entry per group of {group_size}: "
                f"{groups.tolist()}), got {got}.{hint}")
    print("check_informative_groups: all cases pass.")
    return True


def check_zero_variance_probability(fn: Callable[[float, int], float]) -> bool:
    """Check ``fn(p, G)``: the probability that G 0/1 rewards are all equal.

    Each of the G outputs is correct independently with probability ``p``; the group
    teaches nothing when all are correct or all are wrong: :math:`p^G + (1-p)^G`.
    """
    for p in (0.0, 0.1, 0.5, 0.9, 1.0, 0.37):
        for G in (1, 2, 4, 8, 16, 64):
            expected = p ** G + (1 - p) ** G
            call = f"fn(p={p}, G={G})"
            try:
                got = float(fn(p, G))
            except (TypeError, ValueError) as err:
                raise AssertionError(f"{call} should return a number: {err}") from None
            if not math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12):
                raise AssertionError(
                    f"{call}: expected {expected:.6g}, got {got:.6g}. Count the two "
                    f"ways a group of independent 0/1 rewards can have zero variance.")
    print("check_zero_variance_probability: all cases pass.")
    return True


__all__ = ["check_group_advantages", "check_informative_groups",
           "check_zero_variance_probability"]
