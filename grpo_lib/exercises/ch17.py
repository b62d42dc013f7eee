"""Checkers for chapter 17 (Countdown). Solutions: book/solutions/ch17.md."""
from __future__ import annotations

import random
import signal
from contextlib import contextmanager
from fractions import Fraction

from ..rewards import countdown_value_only_reward
from ..safe_math import ExpressionError, expression_literals
from ..tasks.countdown import solve


@contextmanager
def _time_limit(seconds: int, what: str):
    """Stop a reader's function that runs too long (a solver without pruning, or
    ``eval`` on a power tower), with a hint instead of a hang."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def stop(signum, frame):
        raise AssertionError(f"{what} ran for more than {seconds} s.")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------- 17.1 each number exactly once
def reference_uses_each_once(expression: str, numbers) -> bool:
    """The literals of ``expression`` are ``numbers`` as a multiset."""
    try:
        used = sorted(expression_literals(expression))
    except ExpressionError:
        return False
    return used == sorted(Fraction(n) for n in numbers)


_ONCE_CASES = [
    ("3 * 8 - 5", [3, 5, 8]), ("(14 + 13) + 1", [1, 13, 14]),
    ("8 * 8 - 5", [3, 5, 8]),  # 8 twice, 3 never
    ("3 * 8", [3, 5, 8]),  # 5 dropped
    ("3 * 8 - 5 + 1", [3, 5, 8]),  # a number of its own
    ("13 * 4", [1, 3, 4]),  # 13 is not 1 and 3
    ("7 * 7 - 7", [7, 7, 7]), ("7 * 7", [7, 7, 7]),
    ("(20 - 19) * 10 * 1", [20, 1, 19, 10]), ("-3 + 8 * 5", [3, 5, 8]),
    ("3 * (8 - 5", [3, 5, 8]), ("3 8 5", [3, 5, 8]),  # not expressions
    ('__import__("os")', [3, 5, 8]), ("", [3, 5, 8]),
]


def check_uses_each_once(fn) -> bool:
    """Check ``fn(expression, numbers) -> bool``."""
    for expression, numbers in _ONCE_CASES:
        expected = reference_uses_each_once(expression, numbers)
        try:
            got = fn(expression, list(numbers))
        except NotImplementedError:  # the chapter's stub, not an answer
            raise
        except Exception as err:
            raise AssertionError(f"{expression!r}: your function raised "
                                 f"{type(err).__name__}: {err}; text that is not an "
                                 f"expression should give False.") from None
        if bool(got) == expected:
            continue
        hint = ""
        if expression == "13 * 4":
            hint = (" Compare numbers, not digits: the literal 13 is one number. "
                    "grpo_lib.safe_math.expression_literals reads them.")
        elif expression in ("8 * 8 - 5", "7 * 7"):
            hint = " Compare multisets (sorted lists), not sets: count repeats."
        raise AssertionError(f"{expression!r} with numbers {numbers}: expected "
                             f"{expected}, got {got!r}.{hint}")
    print(f"check_uses_each_once: all {len(_ONCE_CASES)} cases pass.")
    return True


# ------------------------------------------------------- 17.2 a value-only checker
def reference_value_only_reward(completion: str, target) -> float:
    """1.0 when the answer block evaluates (safely) to ``target``, whatever numbers
    it uses: the checker that pays the hack
    (:func:`grpo_lib.rewards.countdown_value_only_reward`)."""
    return countdown_value_only_reward([completion], target=[target])[0]


def _answer(expression: str) -> str:
    return f"<think> ... </think> <answer> {expression} </answer>"


_VALUE_CASES = [
    (_answer("3 * 8 - 5"), 19), (_answer("8 + 8 + 3"), 19), (_answer("19"), 19),
    (_answer("3 * 8"), 19), ("3 * 8 - 5", 19), (_answer("2**3"), 8),
    (_answer("(1 / 0)"), 19), (_answer("__import__('os').getcwd()"), 19),
    (_answer("38 / 2"), 19), (_answer("19.0"), 19),
]


def check_value_only_reward(fn) -> bool:
    """Check ``fn(completion, target) -> float``."""
    with _time_limit(5, "the reward"):
        for completion, target in _VALUE_CASES:
            expected = reference_value_only_reward(completion, target)
            try:
                got = float(fn(completion, target))
            except NotImplementedError:
                raise  # the stub: the notebook says what to do
            except Exception as err:  # noqa: BLE001 - the reader's code
                raise AssertionError(
                    f"{completion!r}: the reward raised {type(err).__name__}: {err}. "
                    "A reward never raises on a model's text: return 0.0.") from None
            if got == expected:
                continue
            hint = ""
            if "**" in completion:
                hint = (" `**` is refused: evaluate with grpo_lib.safe_math.safe_eval,"
                        " never eval (9**9**9**9 would hang the run).")
            elif "." in completion:
                hint = (" A decimal is never one of the given whole numbers: an answer "
                        "with a '.' is not an expression here (worth 0.0).")
            elif "<answer>" not in completion:
                hint = " Without an answer block there is nothing to pay."
            raise AssertionError(f"{completion!r}, target {target}: expected "
                                 f"{expected}, got {got}.{hint}")
    print(f"check_value_only_reward: all {len(_VALUE_CASES)} cases pass.")
    return True


# ------------------------------------------------------- 17.3 is the target reachable
def _reachable_cases() -> list[tuple[list[int], int]]:
    rng = random.Random(17)
    cases = [([3, 3, 8, 8], 24), ([1, 5, 5, 5], 24), ([1, 1, 1], 100), ([2, 2], 5),
             ([4, 7], 28), ([5], 5), ([6, 6], 1), ([2, 3], 1)]
    cases += [([rng.randint(1, 12) for _ in range(rng.choice([2, 3, 4]))],
               rng.randint(1, 60)) for _ in range(40)]
    return cases


def check_reachable(fn) -> bool:
    """Check ``fn(numbers, target) -> bool`` against :func:`solve`."""
    with _time_limit(60, "The search"):
        for numbers, target in _reachable_cases():
            expected = solve(numbers, target) is not None
            got = fn(list(numbers), target)
            if bool(got) == expected:
                continue
            hint = ""
            if numbers == [3, 3, 8, 8]:
                hint = (" 8 / (3 - 8 / 3) = 24 passes through 1/3: keep exact "
                        "fractions (fractions.Fraction), not whole numbers only.")
            elif numbers == [2, 3] and target == 1:
                hint = " Try both orders of - and /: 3 - 2 = 1."
            raise AssertionError(f"numbers {numbers}, target {target}: expected "
                                 f"{expected}, got {got!r}.{hint}")
    print(f"check_reachable: all {len(_reachable_cases())} cases agree with the "
          "solver.")
    return True


# ------------------------------------------------------- 17.4 a base's room
def reference_room(answers) -> float:
    """Points between the share of problems that one of a model's samples solves and
    its sampled success: 100 * (1 of k - sampled). ``answers`` holds one row per
    answer with ``mode`` ("greedy" or "sampled"), ``prompt_index`` and ``correct``."""
    sampled = answers[answers["mode"] == "sampled"]
    if sampled.empty:
        raise ValueError("no sampled answers: the room needs several samples per "
                         "problem")
    solved = sampled.groupby("prompt_index")["correct"].any()  # [problems]
    return 100 * (float(solved.mean()) - float(sampled["correct"].mean()))


def _room_case(sampled, greedy):
    """Answers of a few problems: ``sampled[p]`` lists problem p's sample verdicts,
    ``greedy[p]`` its greedy verdict."""
    import pandas as pd

    rows = [{"mode": "greedy", "prompt_index": p, "sample_index": 0, "correct": g}
            for p, g in enumerate(greedy)]
    rows += [{"mode": "sampled", "prompt_index": p, "sample_index": i, "correct": c}
             for p, verdicts in enumerate(sampled) for i, c in enumerate(verdicts)]
    return pd.DataFrame(rows)


_ROOM_CASES = [
    ([[True, False, False, False], [False] * 4, [True] * 4], [True, False, True]),
    ([[True] * 4, [True] * 4], [True, True]),  # every sample right: no room
    ([[False] * 4, [False] * 4], [True, True]),  # greedy right, samples never
    ([[False, False, True, False]], [False]),  # one in four: 75 points of room
    ([[True, True, False, False], [False, True, False, False],
      [False] * 4, [False, False, False, True]], [False, True, False, False]),
]


def check_room(fn) -> bool:
    """Check ``fn(answers) -> float``, the room in points."""
    for sampled, greedy in _ROOM_CASES:
        answers = _room_case(sampled, greedy)
        expected = reference_room(answers)
        got = float(fn(answers.copy()))
        if abs(got - expected) < 1e-9:
            continue
        hint = ""
        if abs(got - reference_room(answers.assign(mode="sampled"))) < 1e-9:
            hint = " Count the sampled rows only: the greedy answer is not a sample."
        elif abs(got) < 1e-9:
            hint = (" A problem counts once when any of its samples is right: group "
                    "the sampled rows by prompt_index and take any().")
        elif abs(got - expected / 100) < 1e-9:
            hint = " Give the room in points: 100 times the difference of shares."
        raise AssertionError(f"samples {sampled}, greedy {greedy}: expected "
                             f"{expected:.2f} points, got {got:.2f}.{hint}")
    print(f"check_room: all {len(_ROOM_CASES)} cases pass.")
    return True
