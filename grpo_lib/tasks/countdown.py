"""Countdown (GRPO-Zero's task): reach a target with given numbers and ``+ - * /``.

A problem is three or four numbers and a target; an answer is an expression that uses
each number exactly once and evaluates to the target, e.g. numbers ``[3, 5, 8]``,
target 19: ``3 * 8 - 5``. Chapter 17 trains on it with
:func:`grpo_lib.rewards.countdown_reward`, which scores answers with the safe
evaluator of chapter 3.

The generator draws the numbers, builds a random expression over them whose value is
a positive integer within ``max_target``, and keeps the problem only when
:func:`solve` proves the target reachable (it is, by construction; the check guards
the generator). Numbers and targets are small, sized for a tiny model. The splits
are made by ``python -m grpo_lib make-data --stage countdown`` and live in
``data/countdown/``.
"""
from __future__ import annotations

import itertools
import random
import re
from fractions import Fraction
from pathlib import Path
from typing import Sequence

from . import read_jsonl

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "countdown"
USER_TEMPLATE = (
    "Using the numbers {numbers}, create an equation that equals {target}. You can "
    "use basic arithmetic operations (+, -, *, /) and each number can only be used "
    "once. Show your work in <think> </think> tags. And return the final answer in "
    "<answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>.")
"""GRPO-Zero's user message (its ``countdown_task.py``), in English."""


def countdown_prompt(numbers: Sequence[int], target: int) -> list[dict]:
    """The chat prompt of one problem: one user message (:data:`USER_TEMPLATE`)."""
    text = USER_TEMPLATE.format(numbers=list(numbers), target=target)
    return [{"role": "user", "content": text}]


def _combine(a: tuple[Fraction, str], b: tuple[Fraction, str]):
    """Every value two sub-expressions make with one operator (``a`` first)."""
    (x, ex), (y, ey) = a, b
    yield x + y, f"({ex} + {ey})"
    yield x - y, f"({ex} - {ey})"
    yield x * y, f"({ex} * {ey})"
    if y != 0:
        yield x / y, f"({ex} / {ey})"


def solve(numbers: Sequence[int], target: int) -> str | None:
    """An expression using each of ``numbers`` once that equals ``target``, or
    ``None`` when there is none.

    Exhaustive: repeatedly replace two of the remaining values by one of their
    combinations (both orders for ``-`` and ``/``), in exact rational arithmetic,
    until one value is left. Four numbers are a few thousand combinations.
    """
    goal = Fraction(target)

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        if len(items) == 1:
            return items[0][1] if items[0][0] == goal else None
        for i, j in itertools.permutations(range(len(items)), 2):
            rest = [items[k] for k in range(len(items)) if k not in (i, j)]
            for value in _combine(items[i], items[j]):
                found = search(rest + [value])
                if found is not None:
                    return found
        return None

    found = search([(Fraction(n), str(n)) for n in numbers])
    return None if found is None else _strip_outer(found)


def _strip_outer(expression: str) -> str:
    """``"(a + b)"`` -> ``"a + b"`` when the outer parentheses enclose everything."""
    if not (expression.startswith("(") and expression.endswith(")")):
        return expression
    depth = 0
    for k, ch in enumerate(expression):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and k < len(expression) - 1:
            return expression  # "(a) + (b)": the first "(" closes early
    return expression[1:-1]


def random_problem(rng: random.Random, count: int, max_number: int = 20,
                   max_target: int = 100) -> dict | None:
    """One problem with ``count`` numbers in 1..``max_number`` and a target in
    1..``max_target`` made from them by a random expression; ``None`` when the draw
    gives no such target (the caller draws again)."""
    numbers = [rng.randint(1, max_number) for _ in range(count)]
    order = rng.sample(numbers, len(numbers))
    items = [(Fraction(n), str(n)) for n in order]
    while len(items) > 1:
        i, j = rng.sample(range(len(items)), 2)
        choices = list(_combine(items[i], items[j]))
        value = rng.choice(choices)
        items = [items[k] for k in range(len(items)) if k not in (i, j)] + [value]
    value, expression = items[0]
    if value.denominator != 1 or not 1 <= value <= max_target:
        return None
    target = int(value)
    solution = solve(numbers, target)
    if solution is None:  # cannot happen: the expression itself reaches it
        raise AssertionError(f"generator bug: {expression} = {target} unsolved")
    return {"numbers": numbers, "target": target, "solution": solution}


def make_problems(n: int, seed: int = 0, counts: Sequence[int] = (3, 4),
                  exclude: set | None = None, **limits) -> list[dict]:
    """``n`` distinct problems (half with 3 numbers, half with 4 by default), none of
    whose ``(sorted numbers, target)`` is in ``exclude``."""
    rng, seen, out = random.Random(seed), set(exclude or ()), []
    while len(out) < n:
        problem = random_problem(rng, counts[len(out) % len(counts)], **limits)
        if problem is None:
            continue
        key = (tuple(sorted(problem["numbers"])), problem["target"])
        if key in seen:
            continue
        seen.add(key)
        out.append(problem)
    return out


def write_splits(out_dir: str | Path = DATA_DIR, n_train: int = 20000,
                 n_test: int = 1000, seed: int = 0) -> dict[str, Path]:
    """Write ``test.jsonl`` then ``train.jsonl`` (no problem in both)."""
    from . import write_jsonl

    test = make_problems(n_test, seed=seed + 1)
    keys = {(tuple(sorted(p["numbers"])), p["target"]) for p in test}
    train = make_problems(n_train, seed=seed + 2, exclude=keys)
    paths = {}
    for name, problems in (("test", test), ("train", train)):
        paths[name] = write_jsonl(problems, Path(out_dir) / f"{name}.jsonl")
        print(f"wrote {len(problems)} problems to {paths[name]}")
    return paths


def load_split(split: str = "train", data_dir: str | Path = DATA_DIR):
    """A committed split as a ``datasets.Dataset``: ``numbers``, ``target``,
    ``solution``, the chat ``prompt`` (the columns ``countdown_reward`` reads), and
    for the evaluation harness's tables a short ``question`` (``"[3, 5, 8] -> 19"``)
    and ``answer`` (one solution; any valid expression counts)."""
    from datasets import Dataset

    path = Path(data_dir) / f"{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist. Create the splits with "
                                f"`python -m grpo_lib make-data --stage countdown`.")
    # a damaged line is an error that names it (read_jsonl)
    rows = read_jsonl(path)
    for r in rows:
        r["prompt"] = countdown_prompt(r["numbers"], r["target"])
        r["question"] = f"{r['numbers']} -> {r['target']}"
        r["answer"] = r["solution"]
    return Dataset.from_list(rows)


_WORKED_STEP = re.compile(  # whole numbers of at most 12 digits, not decimals
    r"(?<!\d)(?<!\d\.)(\d{1,12}) ?([-+*/]) ?(\d{1,12}) ?= ?(\d{1,12})(?!\d|\.\d)")


def worked_steps(text: str | None) -> list[tuple[int, str, int, int, bool]]:
    """The steps ``a op b = c`` (or ``a+b=c``) a response works out, each with
    whether it is right: ``[(a, op, b, c, a op b == c), ...]``, in order.

    Read with a regular expression, so it never evaluates the text; numbers have at
    most 12 digits (a longer one is no step), and ``/`` is right only when it divides
    exactly. ``None`` or text without steps gives ``[]``.
    """
    out = []
    for a, op, b, c in _WORKED_STEP.findall(text or ""):
        a, b, c = int(a), int(b), int(c)
        value = {"+": a + b, "-": a - b, "*": a * b,
                 "/": Fraction(a, b) if b else None}[op]
        out.append((a, op, b, c, value == c))
    return out


def attempts_of(text: str | None) -> list[list[tuple[int, str, int, int, bool]]]:
    """The attempts a response's reasoning works out: each sentence (split at
    ``". "``) of the text before ``</think>`` (all of it when the response was cut
    off) that works at least one step, as its :func:`worked_steps`."""
    reasoning = (text or "").split("</think>")[0]
    return [steps for sentence in reasoning.split(". ")
            if (steps := worked_steps(sentence))]


def attempt_numbers(steps) -> list[int]:
    """The numbers a chain attempt brings in, sorted: the first step's two, then the
    second number of each later step, except a step that retries the step before
    it with another operator (the same two numbers), which brings none."""
    if not steps:
        return []
    used = [steps[0][0], steps[0][2]]
    for (a, _, b, *_), (a0, _, b0, *_) in zip(steps[1:], steps):
        if (a, b) != (a0, b0):
            used.append(b)
    return sorted(used)


def attempt_is_sound(steps, numbers) -> bool:
    """Whether a chain attempt (``steps`` from :func:`worked_steps`) is work that
    could answer the problem: every step right, each step either continuing from
    the result before it or retrying the step before it with another operator, and
    the problem's ``numbers`` each brought in once."""
    if not steps or not all(ok for *_, ok in steps):
        return False
    for (a, _, b, *_), (a0, _, b0, c0, _) in zip(steps[1:], steps):
        if a != c0 and (a, b) != (a0, b0):
            return False
    return attempt_numbers(steps) == sorted(numbers)
