"""Checkers for chapter 15 (test-time scaling and the aha moment).
Solutions: book/solutions/ch15.md."""
from __future__ import annotations

from collections import defaultdict
from itertools import combinations

from ..test_time import _key, first_wrong_step, pass_at_k, process_ok, step_prefixes


# ------------------------------------------------------------------ 15.1 pass@k
def _enumerated(n: int, c: int, k: int) -> float:
    """pass@k by brute force: the share of the k-subsets holding a right answer."""
    subsets = list(combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def check_pass_at_k(fn) -> bool:
    """Check ``fn(n, c, k) -> float``: the chance that ``k`` answers drawn without
    replacement from ``n`` (``c`` of them right) hold at least one right answer."""
    cases = [(4, 1, 1), (4, 1, 2), (5, 2, 3), (6, 3, 4), (8, 1, 8), (8, 0, 3),
             (10, 10, 2), (16, 2, 4), (16, 15, 1)]
    for n, c, k in cases:
        expected = _enumerated(n, c, k)
        got = fn(n, c, k)
        if not isinstance(got, (int, float)) or got != got:
            raise AssertionError(f"n={n}, c={c}, k={k}: expected a number, got "
                                 f"{got!r}.")
        if abs(got - expected) <= 1e-9:
            continue
        hint = ""
        if k > 1 and abs(got - (1 - (1 - c / n) ** k)) <= 1e-9:
            hint = (" 1 - (1 - c/n)^k draws with replacement; the k answers are "
                    "k different samples of the n.")
        elif abs(got - min(1.0, k * c / n)) <= 1e-9:
            hint = (" Adding k chances of c/n counts subsets with two right answers "
                    "twice.")
        raise AssertionError(f"n={n}, c={c}, k={k}: expected {expected:.6f}, got "
                             f"{got:.6f}.{hint}")
    big = fn(200, 3, 100)
    if abs(big - pass_at_k(200, 3, 100)) > 1e-9:
        raise AssertionError(f"n=200, c=3, k=100: expected "
                             f"{pass_at_k(200, 3, 100):.6f}, got {big!r}.")
    print("check_pass_at_k: unbiased pass@k, n=200 included.")
    return True


# ------------------------------------------------------------- 15.2 majority vote
_VOTES = [
    ("a clear winner", ["14", "20", "14"], "14"),
    ("a tie: the first seen", ["20", "14", "14", "20"], "20"),
    ("missing answers do not vote", [None, None, "7"], "7"),
    ("blank and NaN do not vote", ["", float("nan"), " ", "9", None], "9"),
    ("nothing to vote on", [None, ""], None),
    ("one number, written three ways", ["14", "20", "14.0", "20", " 14 "], "14"),
    ("numbers as numbers", [14, "20", "14.0", 20.0, " 14 "], "14"),
    ("words count as they are", ["twenty", "14", "twenty"], "twenty"),
]


def check_majority_vote(fn) -> bool:
    """Check ``fn(answers) -> answer | None``: the most frequent answer by value, a
    tie to the first seen, missing answers left out, ``None`` if none is left."""
    for name, answers, expected in _VOTES:
        got = fn(list(answers))
        if _key(got) == _key(expected):
            continue
        hint = ""
        if expected is not None and _key(got) is None:
            hint = " A missing answer must not win: leave None, NaN and blanks out."
        elif name.startswith(("one number", "numbers as")):
            hint = " Compare numbers by value: grpo_lib.parsing.parse_number."
        elif name.startswith("a tie"):
            hint = " Break ties by the first answer seen, not the last."
        raise AssertionError(f"{name}: {answers!r} should vote {expected!r}, got "
                             f"{got!r}.{hint}")
    print("check_majority_vote: by value, ties to the first seen, blanks left out.")
    return True


# --------------------------------------------------------- 15.3 first wrong step
_Q = "3 + 6 + 5 * 2"
_TRACES = [
    ("the right trace",
     "<think> First 5 * 2 = 10, now 3 + 6 + 10. Then 3 + 6 = 9, now 9 + 10. Finally "
     "9 + 10 = 19. </think> <answer> 19 </answer>"),
    ("left to right: every equation true",
     "<think> First 3 + 6 = 9, now 9 + 5 * 2. Then 9 + 5 = 14, now 14 * 2. Finally "
     "14 * 2 = 28. </think> <answer> 28 </answer>"),
    ("a false equation, then the right answer",
     "<think> First 5 * 2 = 11, now 3 + 6 + 10. Then 3 + 6 = 9, now 9 + 10. Finally "
     "9 + 10 = 19. </think> <answer> 19 </answer>"),
    ("a true check at the end",
     "<think> First 5 * 2 = 10, now 3 + 6 + 10. Then 3 + 6 = 9, now 9 + 10. Then "
     "9 + 10 = 19. Check: 19 - 10 = 9. </think> <answer> 19 </answer>"),
    ("a wrong final step",
     "<think> First 5 * 2 = 10, now 3 + 6 + 10. Then 3 + 6 = 9, now 9 + 10. Finally "
     "9 + 10 = 18. </think> <answer> 18 </answer>"),
    ("no think block", "<answer> 19 </answer>"),
    ("left to right, worded with 现在 (now)",
     "<think> 首先 3 + 6 = 9, 现在 9 + 5 * 2. Then 9 + 5 = 14, 现在 14 * 2. Finally "
     "14 * 2 = 28. </think> <answer> 28 </answer>"),
]


def check_first_wrong_step(fn) -> bool:
    """Check ``fn(text, question) -> int | None``: the index of the first step that
    is false or leaves an expression whose value is not the question's; ``None``
    when every step is right."""
    for name, text in _TRACES:
        expected = first_wrong_step(text, _Q)
        got = fn(text, _Q)
        if got == expected:
            continue
        hint = ""
        if name.startswith("left to right") and got is None:
            hint = (" Each equation is true, but 9 + 5 = 14 leaves 14 * 2 = 28, not "
                    "the question's 19: check the expression after 'now' as well.")
        elif "现在" in name:
            hint = (" The base model also writes '现在' for 'now' (and '首先' for "
                    "'First'): a step must be read in either wording.")
        raise AssertionError(f"{name}: expected {expected!r}, got {got!r}.{hint}")
    print("check_first_wrong_step: false equations and wrong turns both found.")
    return True


# ------------------------------------------------------- 15.4 soft value labels
_SHARED = "<think> First 5 * 2 = 10, now 3 + 6 + 10."
_ANSWERS = [
    _SHARED + " Then 3 + 6 = 9, now 9 + 10. Finally 9 + 10 = 19. </think> "
    "<answer> 19 </answer>",
    _SHARED + " Then 3 + 6 = 8, now 8 + 10. Finally 8 + 10 = 18. </think> "
    "<answer> 18 </answer>",
    "<think> First 3 + 6 = 9, now 9 + 5 * 2. Then 9 + 5 = 14, now 14 * 2. Finally "
    "14 * 2 = 28. </think> <answer> 28 </answer>",
    _SHARED + " Then 3 + 6 = 9, now 9 + 10. Finally 9 + 10 = 19. </think> "
    "<answer> 19 </answer>",  # the first answer again: a second rollout
    "<answer> 19 </answer>",  # no steps: one state, and it fails process_ok
]


def _soft_labels(completions, question) -> dict[str, float]:
    through = defaultdict(list)  # state -> the grades of the answers through it
    for completion in completions:
        ok = process_ok(completion, question)
        for state in step_prefixes(completion):
            through[state].append(ok)
    return {state: sum(oks) / len(oks) for state, oks in through.items()}


def check_soft_labels(fn) -> bool:
    """Check ``fn(completions, question) -> dict[str, float]``: every state of the
    answers (``step_prefixes``), mapped to the share of the answers through it that
    pass ``process_ok``."""
    if fn([], _Q) != {}:
        raise AssertionError("no answers: expected an empty dict.")
    expected = _soft_labels(_ANSWERS, _Q)
    got = fn(list(_ANSWERS), _Q)
    if not isinstance(got, dict):
        raise AssertionError(f"expected a dict from state to label, got "
                             f"{type(got).__name__}.")
    missing, extra = set(expected) - set(got), set(got) - set(expected)
    if missing or extra:
        raise AssertionError(
            f"{len(missing)} states missing and {len(extra)} unexpected: the states "
            "are grpo_lib.test_time.step_prefixes of each answer, texts as they are.")
    try:
        got = {state: float(label) for state, label in got.items()}
    except (TypeError, ValueError):
        raise AssertionError("every label must be a number: the share of the answers "
                             "through the state that pass.") from None
    shared = got[_SHARED]
    if abs(shared - expected[_SHARED]) > 1e-9:
        hint = ""
        if shared in (0.0, 1.0):
            hint = (" That is one answer's grade; a state that several answers pass "
                    "through gets the share of them that pass.")
        elif abs(shared - 0.5) < 1e-9:
            hint = (" Two answers are the same text: each is a rollout of its own, "
                    "so count both.")
        raise AssertionError(
            f"the first step that three answers share: expected "
            f"{expected[_SHARED]:.3f} (two of the three pass), got {shared!r}.{hint}")
    for state, label in expected.items():
        if abs(got[state] - label) > 1e-9:
            raise AssertionError(f"state {state[-40:]!r}: expected {label:.3f}, got "
                                 f"{got[state]!r}.")
    print("check_soft_labels: every state gets the share of its rollouts that pass.")
    return True
