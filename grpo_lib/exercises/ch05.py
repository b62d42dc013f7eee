"""Checkers for chapter 5's exercises (the task and its designed mistake).

Each ``check_*`` runs the learner's function on a few hundred generated problems, with
and without parentheses, and raises ``AssertionError`` naming the first failing input,
the expected value and what came back. Solutions: ``book/solutions/ch05.md``.
"""
from __future__ import annotations

from typing import Callable

from ..tasks.arithmetic import Difficulty, evaluate_expression, make_problems

_HAND_CASES = ["2 + 3 * 4", "(2 + 3) * 4", "9 - 2 * 3", "8 * (1 + 2) - 5", "7 - 3 - 2",
               "6 + 2 * (3 - 1)", "5 * 4"]


def _questions() -> list[str]:
    generated = make_problems(300, seed=11, difficulty=Difficulty(paren_prob=0.5))
    return _HAND_CASES + [p.question for p in generated]


def check_left_to_right(fn: Callable[[str], int]) -> bool:
    """``fn(question)`` evaluates strictly left to right, parentheses first."""
    for q in _questions():
        expected = evaluate_expression(q, precedence=False)
        got = fn(q)
        if got != expected:
            hint = ""
            if got == evaluate_expression(q, precedence=True):
                hint = " That is the *correct* value: this exercise wants the mistake."
            elif "(" in q:
                hint = " Check that parentheses are still evaluated first."
            raise AssertionError(f"fn({q!r}): expected {expected} (left to right), got "
                                 f"{got!r}.{hint}")
    print(f"check_left_to_right: all {len(_questions())} problems pass.")
    return True


def check_precedence_matters(fn: Callable[[str], bool]) -> bool:
    """``fn(question)`` is True exactly when left-to-right evaluation changes the
    answer."""
    for q in _questions():
        expected = evaluate_expression(q, True) != evaluate_expression(q, False)
        got = fn(q)
        if not isinstance(got, bool) or got != expected:
            raise AssertionError(
                f"fn({q!r}): expected {expected} (correct value "
                f"{evaluate_expression(q, True)}, left to right "
                f"{evaluate_expression(q, False)}), got {got!r}. A '*' after a '+' or "
                f"'-' is not enough: '9 - 7 * 1' gives 2 both ways.")
    print(f"check_precedence_matters: all {len(_questions())} problems pass.")
    return True
