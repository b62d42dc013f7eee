"""Checkers for chapter 9 (failure modes). Solutions: book/solutions/ch09.md."""
from __future__ import annotations

import math

import torch

from ..losses import adaptive_entropy_coef


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
            raw = list(raw)  # a list, an array, a tensor or a generator
            got = [int(i) for i in raw]
        except (TypeError, ValueError, RuntimeError):
            raise AssertionError(
                f"expected a list of group indices, got {raw!r}.") from None
        if got == expected:
            continue
        hint = ""
        if raw and all(type(x).__name__ in ("bool", "bool_") for x in raw):
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


def reference_mean_entropy(logits, mask) -> float:
    """Token-mean entropy in nats, the trainer's ``entropy`` column.

    .. math:: \\bar H = \\frac{\\sum_{i,t} m_{i,t} H_{i,t}}{\\sum_{i,t} m_{i,t}},
              \\quad H_{i,t} = -\\sum_v p_{i,t,v} \\log p_{i,t,v}

    ``logits``: ``[B, T, V]``; ``mask``: ``[B, T]`` (1 on completion tokens).
    """
    logp = torch.log_softmax(logits.double(), dim=-1)  # [B, T, V]
    entropy = -(logp.exp() * logp).sum(-1)  # [B, T]
    mask = mask.double()
    return ((entropy * mask).sum() / mask.sum()).item()


def _entropy_cases():
    g = torch.Generator().manual_seed(9)
    uniform = torch.zeros(1, 2, 4)  # H = log 4 at both tokens
    mask_uneven = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    peaked = torch.randn(2, 5, 11, generator=g) * 3
    peaked[0, :, 0] += 200.0  # in float32 softmax underflows to 0 for the others
    return [
        (uniform, torch.ones(1, 2)),
        (torch.randn(2, 5, 7, generator=g), mask_uneven),
        (peaked, mask_uneven),
        (torch.randn(3, 4, 50, generator=g) * 0.5, torch.ones(3, 4)),
    ]


def check_mean_entropy(fn) -> bool:
    """Check ``fn(logits [B, T, V], mask [B, T]) -> float``: the token-mean entropy.

    Known value: all-zero logits over 4 tokens -> log 4 = 1.3863 nats.
    """
    for logits, mask in _entropy_cases():
        expected = reference_mean_entropy(logits, mask)
        got = fn(logits.clone(), mask.clone())
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise AssertionError(f"expected a number, got {got!r:.80}.") from None
        if math.isclose(got, expected, rel_tol=1e-4, abs_tol=1e-5):
            continue
        hint = ""
        logp = torch.log_softmax(logits.double(), dim=-1)
        per_token = -(logp.exp() * logp).sum(-1)  # [B, T]
        m = mask.double()
        if math.isnan(got):
            hint = (" NaN: softmax underflows to 0 for unlikely tokens and "
                    "0 * log(0) is NaN; take log_softmax and exponentiate it.")
        elif math.isclose(got, -expected, rel_tol=1e-4, abs_tol=1e-5):
            hint = " The sign is flipped: H = -sum p log p is never negative."
        elif math.isclose(got, expected / math.log(2), rel_tol=1e-4):
            hint = " That is in bits (log2); the trainer logs nats (natural log)."
        elif math.isclose(got, per_token.mean().item(), rel_tol=1e-4):
            hint = (" You averaged over every position, padding included; weight by "
                    "the mask.")
        elif math.isclose(got, ((per_token * m).sum(-1) / m.sum(-1)).mean().item(),
                          rel_tol=1e-4):
            hint = (" You averaged each completion first, then the completions; the "
                    "trainer's column is one mean over all completion tokens.")
        raise AssertionError(
            f"logits of shape {tuple(logits.shape)}, {int(mask.sum())} completion "
            f"tokens: expected {expected:.5f}, got {got:.5f}.{hint}")
    print("check_mean_entropy: the token-mean entropy, in nats, on uniform, random "
          "and very peaked logits.")
    return True


def _sync_pair(seed: int):
    """A policy and its reference: two small networks of one shape, other weights."""
    torch.manual_seed(seed)

    def net():
        return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 3))

    return net(), net()


def check_sync_reference(fn) -> bool:
    """Check ``fn(policy, reference, alpha)``: move ``reference``'s parameters, in
    place, to ``alpha * theta + (1 - alpha) * theta_ref``; the policy stays as it is.

    Known value: ``alpha = 1`` makes the reference a copy of the policy.
    """
    for seed, alpha in [(0, 0.6), (1, 1.0), (2, 0.25)]:
        policy, reference = _sync_pair(seed)
        theta = [p.detach().clone() for p in policy.parameters()]
        before = [p.detach().clone() for p in reference.parameters()]
        try:
            fn(policy, reference, alpha)
        except RuntimeError as err:
            if "leaf Variable" in str(err):
                raise AssertionError(
                    "an in-place change of a parameter that requires grad: do it "
                    "under torch.no_grad() (nothing here should build a graph)."
                ) from None
            raise
        after = [p.detach() for p in reference.parameters()]
        if not all(torch.equal(p.detach(), t)
                   for p, t in zip(policy.parameters(), theta)):
            raise AssertionError(f"alpha={alpha}: the policy changed; only the "
                                 f"reference moves toward it.")
        if all(torch.equal(a, b) for a, b in zip(after, before)):
            raise AssertionError(
                f"alpha={alpha}: the reference's parameters did not change. Assigning "
                f"a new tensor to a loop variable changes nothing; change each "
                f"parameter in place (.mul_ and .add_, or .copy_).")
        expected = [alpha * t + (1 - alpha) * b for t, b in zip(theta, before)]
        swapped = [(1 - alpha) * t + alpha * b for t, b in zip(theta, before)]
        if all(torch.allclose(a, e, atol=1e-6) for a, e in zip(after, expected)):
            continue
        hint = ""
        if all(torch.allclose(a, s, atol=1e-6) for a, s in zip(after, swapped)):
            hint = (" You gave alpha to the old reference: alpha is the policy's "
                    "share of the new reference.")
        worst = max((a - e).abs().max().item() for a, e in zip(after, expected))
        raise AssertionError(
            f"alpha={alpha}: the reference is not alpha * theta + (1 - alpha) * "
            f"theta_ref (largest difference {worst:.3g}).{hint}")
    print("check_sync_reference: the reference moves to alpha theta + (1 - alpha) "
          "theta_ref in place, and the policy stays, for alpha 0.6, 1 and 0.25.")
    return True


def reference_applied_entropy_coefs(entropies, target: float, delta: float,
                                    coef_min: float, coef_max: float,
                                    coef: float = 0.0) -> list[float]:
    """The coefficient each optimizer step applies under adaptive entropy control.

    Step :math:`k` applies :math:`c` only if step :math:`k-1`'s mean entropy was at
    or under the target (step 1 has no step before it: 0); after step :math:`k`,
    :math:`c` moves by :func:`grpo_lib.losses.adaptive_entropy_coef` with step
    :math:`k`'s entropy. ``entropies``: the steps' mean entropies, in order.
    """
    applied, last = [], None
    for entropy in entropies:
        applied.append(coef if last is not None and last <= target else 0.0)
        coef = adaptive_entropy_coef(coef, entropy, target, delta, coef_min, coef_max)
        last = entropy
    return applied


def _schedule_cases():
    return [  # (entropies, target, delta, coef_min, coef_max, first coefficient)
        ([0.1, 0.1, 0.1, 0.3, 0.3, 0.1, 0.1], 0.2, 0.05, 0.0, 0.12, 0.0),
        ([0.2, 0.2, 0.25, 0.2, 0.15], 0.2, 0.01, 0.0, 1.0, 0.0),  # at the target
        ([0.5, 0.5, 0.1, 0.1, 0.5], 0.3, 0.02, 0.01, 0.05, 0.04),  # a floor above 0
        ([0.05] * 12, 0.2, 0.005, 0.0, 1.0, 0.0),  # TRL's step, always under
    ]


def check_applied_entropy_coefs(fn) -> bool:
    """Check ``fn(entropies, target, delta, coef_min, coef_max, coef) -> list``.

    Known value: entropies ``[0.1, 0.1, 0.1, 0.3, 0.3, 0.1, 0.1]`` with target 0.2,
    delta 0.05, range [0, 0.12] and a first coefficient of 0 apply
    ``[0, 0.05, 0.1, 0.12, 0, 0, 0.07]``.
    """
    for entropies, target, delta, low, high, coef in _schedule_cases():
        args = (list(entropies), target, delta, low, high, coef)
        expected = reference_applied_entropy_coefs(*args)
        raw = fn(*args)
        try:
            got = [float(c) for c in raw]
        except (TypeError, ValueError):
            raise AssertionError(f"expected a list of numbers, got {raw!r}.") from None
        if len(got) == len(expected) and all(
                math.isclose(g, e, abs_tol=1e-9) for g, e in zip(got, expected)):
            continue
        hint = ""
        now = []  # gated by the step's own entropy, which is not known before it
        c = coef
        for h in entropies:
            now.append(c if h <= target else 0.0)
            c = adaptive_entropy_coef(c, h, target, delta, low, high)
        if len(got) == len(now) and all(math.isclose(g, e, abs_tol=1e-9)
                                        for g, e in zip(got, now)):
            hint = (" A step's bonus is fixed before its entropy is measured: gate it "
                    "by the previous step's entropy (and apply none at the first "
                    "step).")
        elif got and math.isclose(got[0], coef, abs_tol=1e-9) and coef != 0:
            hint = " The first step has no step before it: it applies no bonus."
        shown = [round(x, 4) for x in got]
        raise AssertionError(
            f"entropies {entropies}, target {target}, delta {delta}, range "
            f"[{low}, {high}], first coefficient {coef}: expected "
            f"{[round(x, 4) for x in expected]}, got {shown}.{hint}")
    print("check_applied_entropy_coefs: the coefficients applied match adaptive "
          "entropy control, at the target, with a floor and a cap.")
    return True
