"""Checkers for chapter 9 (failure modes). Solutions: book/solutions/ch09.md."""
from __future__ import annotations

import math

import torch


def reference_zero_std_frac(rewards, group_size: int) -> float:
    """Share of groups whose ``group_size`` rewards are all equal (no learning signal).

    .. math:: \\frac{1}{N_g}\\sum_{g} \\mathbb 1\\big[r_{g,1} = \\dots = r_{g,G}\\big]

    Groups are contiguous (``rewards.view(-1, G)``), as in the trainer's
    ``zero_std_frac`` column.
    """
    grouped = torch.as_tensor(rewards, dtype=torch.float64).view(-1, group_size)
    return (grouped == grouped[:, :1]).all(dim=1).double().mean().item()


def reference_informative_groups(rewards, group_size: int) -> list[int]:
    """Indices of the groups whose rewards are not all equal (DAPO's filter, eq. 11)."""
    grouped = torch.as_tensor(rewards, dtype=torch.float64).view(-1, group_size)
    return (grouped != grouped[:, :1]).any(dim=1).nonzero().flatten().tolist()


def _reward_cases():
    g = torch.Generator().manual_seed(9)
    random_binary = (torch.rand(40, generator=g) < 0.8).double() * 1.0  # 10 groups of 4
    return [
        ([1.1, 1.1, 1.1, 1.1, 0.1, 1.1, 1.0, 0.1], 4),  # one dead group, one alive
        ([0.0, 0.0, 1.0, 1.0, 0.5, 0.5], 2),  # all dead (pairs of equal rewards)
        ([1.0, 0.0, 1.0, 0.0], 4),  # one alive group
        ([0.1] * 8 + [1.1] * 8 + [1.1] * 7 + [1.0], 8),  # 1.1 vs 1.0 still informative
        (random_binary.tolist(), 4),
    ]


def check_zero_std_frac(fn) -> bool:
    """Check ``fn(rewards: list[float], group_size) -> float``: dead groups' share.

    Known values: ``[1.1, 1.1, 1.1, 1.1, 0.1, 1.1, 1.0, 0.1]`` with G = 4 -> 0.5;
    ``[0, 0, 1, 1, 0.5, 0.5]`` with G = 2 -> 1.0.
    """
    for rewards, G in _reward_cases():
        expected = reference_zero_std_frac(rewards, G)
        got = fn(list(rewards), G)
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise AssertionError(f"expected a number, got {got!r}.") from None
        if math.isclose(got, expected, abs_tol=1e-6):
            continue
        hint = ""
        by_position = torch.as_tensor(rewards, dtype=torch.float64).view(G, -1)
        transposed = (by_position == by_position[:, :1]).all(1).double().mean().item()
        if math.isclose(got, transposed, abs_tol=1e-6):
            hint = (" Groups are contiguous: reshape to (num_groups, G) with "
                    "view(-1, G), not (G, num_groups).")
        raise AssertionError(
            f"rewards {[round(r, 2) for r in rewards][:12]}"
            f"{' ...' if len(rewards) > 12 else ''}, G={G}: expected {expected:.4f}, "
            f"got {got:.4f}.{hint}")
    print("check_zero_std_frac: correct on dead and live groups, G = 2, 4, 8.")
    return True


def check_informative_groups(fn) -> bool:
    """Check ``fn(rewards: list[float], group_size) -> list[int]`` (sorted group ids).

    The groups dynamic sampling keeps: those whose rewards are not all equal.
    ``[1.1, 1.1, 1.1, 1.1, 0.1, 1.1, 1.0, 0.1]`` with G = 4 -> ``[1]``. (Chapter 1's
    checker of the same name wants one bool per group instead.)
    """
    for rewards, G in _reward_cases():
        expected = reference_informative_groups(rewards, G)
        raw = fn(list(rewards), G)
        try:
            got = [int(i) for i in raw]
        except (TypeError, ValueError):
            raise AssertionError(
                f"expected a list of group indices, got {raw!r}.") from None
        if got == expected:
            continue
        hint = ""
        if raw and all(isinstance(x, bool) or type(x).__name__ == "bool_" for x in raw):
            hint = (" You returned one bool per group; return the indices of the "
                    "groups to keep (e.g. [1] for the second group only).")
        elif got and max(got) >= len(rewards) // G:
            hint = (" Return group indices (0 .. num_groups - 1), not completion "
                    "indices.")
        elif sorted(set(got) | set(expected)) == list(range(len(rewards) // G)) and \
                not set(got) & set(expected):
            hint = " You returned the dead groups; keep the ones with any variance."
        raise AssertionError(
            f"rewards {[round(r, 2) for r in rewards][:12]}"
            f"{' ...' if len(rewards) > 12 else ''}, G={G}: expected {expected}, "
            f"got {got}.{hint}")
    print("check_informative_groups: keeps exactly the groups with reward variance.")
    return True
