"""Checkers for chapter 3's exercises (rule rewards). Solutions: book/solutions/ch03.md.

Each ``check_*`` runs the learner's attempt on cases with known answers and raises
``AssertionError`` naming the input, the expected value and what came back; on success
it prints one line and returns True.

Also here: :func:`substring_correctness`, the deliberately hackable accuracy rule that
chapter 3 hacks on purpose (section 3.10) and exercise 3.3 asks the learner to game.
"""
from __future__ import annotations

import math

from ..rewards import accuracy_reward, format_reward, soft_overlong_punishment


def substring_correctness(completions: list[str], answer: list[str],
                          **kwargs) -> list[float]:
    """A hackable accuracy rule (as in popular GSM8K recipes): 1.0 if the gold answer
    *occurs in* the text of the ``<answer>`` block (greedy match), else 0.0.

    Do not train with it: ``"<answer> 0 1 2 ... 99 </answer>"`` is "correct" for every
    gold answer from 0 to 99. :func:`grpo_lib.rewards.accuracy_reward` parses instead.
    """
    scores = []
    for text, gold in zip(completions, answer):
        text = text if isinstance(text, str) else ""
        # greedy: from the first "<answer>" to the last "</answer>" after it
        start, end = text.find("<answer>"), text.rfind("</answer>")
        extracted = text[start + 8:end].strip() if 0 <= start <= end - 8 else ""
        scores.append(1.0 if str(gold) in extracted else 0.0)
    return scores


_FORMAT_CASES = [
    "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>",
    "\n<think>\n3 * 4 = 12\n</think>\n\n<answer>\n14\n</answer>\n",
    "<think>a</think><answer>14</answer>",
    "<answer> 14 </answer>",
    "<think> a </think>",
    "Sure! <think> a </think> <answer> 14 </answer>",
    "<think> a </think> <answer> 14 </answer> Hope it helps",
    "<think> a </think> so <answer> 14 </answer>",
    "<answer> 14 </answer> <think> a </think>",
    "<think> a </think> <answer> 20 </answer><answer> 14 </answer>",
    "<think> a <think> b </think> </think> <answer> 14 </answer>",
    "<think> a </think> <answer> <think> b </think> 14 </answer>",
    "<think></think><answer>14</answer>",
    "<think> a </think><answer>   </answer>",
    "<think> a <answer> 14 </answer>",
    "",
    None,
]


def check_strict_format_reward(fn) -> bool:
    """Check ``fn(completions) -> list[float]``: 1.0 for exactly one non-blank think
    block then one non-blank answer block (whitespace around and between), else 0.0."""
    expected = format_reward(_FORMAT_CASES)
    try:
        got = fn(list(_FORMAT_CASES))
    except NotImplementedError:
        raise
    except Exception as err:  # noqa: BLE001 - report the learner's crash
        raise AssertionError(
            f"your function raised {type(err).__name__}: {err}. A reward function "
            "must not raise on model output: None and '' should score 0.0.") from err
    if not hasattr(got, "__len__") or len(got) != len(_FORMAT_CASES):
        raise AssertionError(f"return one score per completion: expected a list of "
                             f"{len(_FORMAT_CASES)} floats, got {got!r:.80}")
    for text, want, have in zip(_FORMAT_CASES, expected, got):
        if float(have) != want:
            why = "it is well formatted" if want else "it is not well formatted"
            raise AssertionError(f"for completion {text!r}: expected {want}, got "
                                 f"{have} ({why}).")
    print(f"check_strict_format_reward: all {len(_FORMAT_CASES)} cases right, "
          "including injected, nested and empty blocks.")
    return True


def check_soft_overlong_punishment(fn) -> bool:
    """Check ``fn(lengths, max_len, cache) -> list[float]`` against DAPO eq. 13."""
    for max_len, cache in ((10, 4), (100, 30)):
        start = max_len - cache
        lengths = sorted({0, 1, start - 1, start, start + 1, max_len - 1, max_len,
                          max_len + 1, 3 * max_len})
        expected = soft_overlong_punishment(
            ["x"] * len(lengths), max_completion_len=max_len, soft_punish_cache=cache,
            completion_ids=[[0] * n for n in lengths])
        got = fn(list(lengths), max_len, cache)
        if not hasattr(got, "__len__") or len(got) != len(lengths):
            raise AssertionError(f"return one penalty per length: expected "
                                 f"{len(lengths)} values, got {got!r:.80}")
        for n, want, have in zip(lengths, expected, got):
            if math.isclose(float(have), want, abs_tol=1e-9):
                continue
            hint = ""
            if math.isclose(float(have), -want, abs_tol=1e-9):
                hint = " The sign is flipped: it is a punishment (<= 0)."
            elif n == start:
                hint = " At exactly max_len - cache the penalty is still 0."
            elif n == max_len:
                hint = " At exactly max_len the ramp reaches -1 (it is inclusive)."
            raise AssertionError(f"max_len={max_len}, cache={cache}, length={n}: "
                                 f"expected {want:.4f}, got {float(have):.4f}.{hint}")
    print("check_soft_overlong_punishment: correct on both sides of every boundary.")
    return True


def check_spray_hack(text) -> bool:
    """Check a completion that games :func:`substring_correctness` for every gold answer
    in 0..999 while having the strict format and scoring 0 under ``accuracy_reward``."""
    if not isinstance(text, str):
        raise AssertionError(f"return the completion as a string, got "
                             f"{type(text).__name__}")
    golds = [str(k) for k in range(1000)]
    if format_reward([text]) != [1.0]:
        raise AssertionError(
            "the completion must have the strict format: "
            "<think> ... </think> <answer> ... </answer>, nothing else.")
    hits = substring_correctness([text] * len(golds), answer=golds)
    missed = [g for g, h in zip(golds, hits) if h != 1.0]
    if missed:
        raise AssertionError(f"the substring rule does not pay for {len(missed)} gold "
                             f"answers, e.g. {missed[:5]}; each must occur in the "
                             "answer text.")
    scores = accuracy_reward([text] * len(golds), answer=golds)
    paid = [g for g, s in zip(golds, scores) if s]
    if paid:
        raise AssertionError(f"accuracy_reward pays for {paid[:5]}: your answer block "
                             "is a genuine answer for those. The hack should fool only "
                             "the substring rule.")
    print(f"check_spray_hack: the substring rule pays for all 1000 answers "
          f"({len(text)} characters); accuracy_reward for none.")
    return True
