"""grpo_lib.tasks.countdown: the solver, the generator and the committed splits,
checked against the safe Countdown reward of chapter 3."""
import random
from fractions import Fraction

import pytest

from grpo_lib.rewards import countdown_answer_reward, countdown_reward
from grpo_lib.safe_math import safe_eval
from grpo_lib.tasks import countdown, load_task_split


def answer(expression):
    return f"<think> ... </think> <answer> {expression} </answer>"


@pytest.mark.parametrize("numbers, target", [
    ([3, 5, 8], 19), ([45, 43, 83, 38], 33), ([2, 3, 4], 24), ([1, 5, 5, 5], 24),
    ([3, 3, 8, 8], 24),  # needs a fraction on the way: 8 / (3 - 8 / 3)
])
def test_solver_finds_a_valid_expression(numbers, target):
    found = countdown.solve(numbers, target)
    assert found is not None
    assert safe_eval(found) == Fraction(target)
    assert countdown_answer_reward([answer(found)], numbers=[numbers],
                                   target=[target]) == [1.0]


@pytest.mark.parametrize("numbers, target", [([1, 1, 1], 100), ([2, 2], 5),
                                             ([7, 7, 7], 1000)])
def test_solver_says_none_when_unreachable(numbers, target):
    assert countdown.solve(numbers, target) is None


def test_generated_problems_are_reachable_and_distinct():
    problems = countdown.make_problems(60, seed=3, max_number=12, max_target=50)
    keys = {(tuple(sorted(p["numbers"])), p["target"]) for p in problems}
    assert len(keys) == 60
    assert {len(p["numbers"]) for p in problems} == {3, 4}
    for p in problems:
        assert 1 <= p["target"] <= 50 and max(p["numbers"]) <= 12
        assert countdown_answer_reward([answer(p["solution"])], numbers=[p["numbers"]],
                                       target=[p["target"]]) == [1.0]
    assert countdown.make_problems(5, seed=3) == countdown.make_problems(5, seed=3)


def test_random_problem_returns_none_or_an_integer_target():
    rng = random.Random(0)
    for _ in range(50):
        p = countdown.random_problem(rng, 3, max_number=9, max_target=20)
        assert p is None or (isinstance(p["target"], int) and 1 <= p["target"] <= 20)


def test_committed_splits_load_with_prompts_the_reward_reads():
    test = load_task_split("countdown", "test")
    train = load_task_split("countdown", "train")
    assert (len(test), len(train)) == (1000, 20000)
    key = lambda r: (tuple(sorted(r["numbers"])), r["target"])  # noqa: E731
    assert not {key(r) for r in test} & {key(r) for r in train.select(range(5000))}
    row = test[0]
    assert row["prompt"][0]["role"] == "user"
    assert str(row["target"]) in row["prompt"][0]["content"]
    scores = countdown_reward([answer(r["solution"]) for r in test.select(range(50))],
                              numbers=test["numbers"][:50], target=test["target"][:50])
    assert scores == [1.1] * 50  # right answer (1) + strict format (0.1)


def test_missing_splits_say_how_to_make_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="make-data --stage countdown"):
        countdown.load_split("train", data_dir=tmp_path)
