r"""Rule-based rewards: R1-Zero's, and the shaping rewards of Open-R1, Kimi and DAPO.

Every reward is a plain per-sample function (TRL's convention minus the chat wrapping)::

    fn(completions: list[str], **columns) -> list[float]

* ``completions`` — one string per sample (TRL's conversational form, a list of
  ``{"role", "content"}`` messages, is accepted too: the last message counts).
* ``**columns`` — dataset columns as lists aligned with ``completions``
  (``answer=[...]``, ``numbers=[...]``, ``target=[...]``); columns a function does not
  use are swallowed.
* **Model output never raises.** ``None``, non-strings, empty or 1 MB completions,
  injected tags, unicode digits: each gets a finite score, the one the rule gives.
* **Programmer mistakes do raise**, with a message saying what to pass: a missing
  column, a column whose length differs from ``completions``, a bad parameter.

:func:`combine_rewards` turns several functions and weights into one reward
:math:`r = \sum_k w_k r_k` whose per-function scores stay available for logging.
"""
from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Any, Callable, Iterable, Sequence

from .parsing import (
    ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN, answers_equal, completion_text,
    extract_answer, is_well_formatted, normalize_digits, repeated_ngram_fraction,
    script_counts, think_text,
)
from .safe_math import ExpressionError, expression_literals, safe_eval

__all__ = [
    "RewardFunction", "format_reward", "soft_format_reward", "accuracy_reward",
    "answer_anywhere_reward", "signed_accuracy_reward", "countdown_format_reward",
    "countdown_answer_reward", "countdown_reward", "countdown_worked_answer_reward",
    "countdown_repeat_penalty", "countdown_verdict", "COUNTDOWN_VERDICTS",
    "countdown_value_only_reward", "language_consistency_reward",
    "reasoning_steps_reward", "length_reward", "cosine_scaled_reward",
    "length_bonus_reward", "repetition_penalty_reward", "soft_overlong_punishment",
    "combine_rewards", "CombinedReward", "with_params", "reward_name",
    "REWARD_FUNCTIONS", "countdown_sound_attempt_reward", "process_reward",
]

RewardFunction = Callable[..., list]


# ----------------------------------------------------------------------------- helpers
def _texts(completions: Any, fn: str) -> list[str | None]:
    """The completions as text (``None`` where a completion is not text)."""
    if isinstance(completions, (str, bytes)) or not isinstance(completions, Iterable):
        raise TypeError(
            f"{fn}: pass a list of completions (one string per sample), got "
            f"{type(completions).__name__}; e.g. {fn}(['<think> … </think> <answer> 14 "
            "</answer>'], ...)"
        )
    return [completion_text(c) for c in completions]


def _column(values: Any, name: str, n: int, fn: str, example: str) -> list:
    """Check a dataset column: present, a list-like, one entry per completion."""
    if values is None:
        raise TypeError(
            f"{fn} needs the column {name!r}: pass {name}=[...] with one entry per "
            f"completion, e.g. {name}={example}"
        )
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(
            f"{fn}: {name} must be a list with one entry per completion, got "
            f"{type(values).__name__} {values!r:.60}; e.g. {name}={example}"
        )
    if len(values) != n:
        raise ValueError(
            f"{fn}: {name} has {len(values)} entries but there are {n} completions; "
            f"pass one {name} per completion (repeat each prompt's value "
            "num_generations times)"
        )
    return list(values)


def _lengths(texts: list[str | None], completion_ids: Any, fn: str) -> list[int]:
    """Token counts if ``completion_ids`` (TRL passes it) is given, else characters."""
    if completion_ids is None:
        return [len(t) if t is not None else 0 for t in texts]
    ids = _column(completion_ids, "completion_ids", len(texts), fn, "[[785, 42], ...]")
    return [len(row) for row in ids]


def _correct(texts: list[str | None], answer: Any, strict: bool, fn: str) -> list[bool]:
    gold = _column(answer, "answer", len(texts), fn, '["14", "7"]')
    return [answers_equal(extract_answer(t, strict=strict), g)
            for t, g in zip(texts, gold)]


# ----------------------------------------------------------------------------- format
def format_reward(completions: list[str], **kwargs) -> list[float]:
    r"""1.0 when the **whole** completion is one think block then one answer block.

    .. math:: r = \mathbb{1}\big[\, y = \texttt{<think>}\,T\,\texttt{</think>}\,
       \texttt{<answer>}\,A\,\texttt{</answer>} \text{ up to whitespace} \,\big]

    with non-blank ``T`` and ``A`` containing no tags, and nothing outside the two
    blocks (see :func:`grpo_lib.parsing.is_well_formatted`). R1-Zero's format reward
    (DeepSeek-AI 2025): reasoning in ``<think>``, answer in ``<answer>``. Floor: 0.0.
    """
    return [1.0 if is_well_formatted(t, strict=True) else 0.0
            for t in _texts(completions, "format_reward")]


def soft_format_reward(completions: list[str], **kwargs) -> list[float]:
    """1.0 when a think block and, after it, an answer block appear anywhere, else 0.0.

    The lenient variant (text around the blocks is allowed), as in popular GSM8K GRPO
    recipes. Floor: 0.0.
    """
    return [1.0 if is_well_formatted(t, strict=False) else 0.0
            for t in _texts(completions, "soft_format_reward")]


# ----------------------------------------------------------------------------- accuracy
def accuracy_reward(completions: list[str], answer: Sequence | None = None,
                    strict: bool = True, **kwargs) -> list[float]:
    r"""1.0 when the completion's answer equals the gold answer, else 0.0.

    .. math:: r_i = \mathbb{1}\left[\operatorname{equal}(\operatorname{extract}(y_i),
       a_i)\right]

    * ``answer`` — the gold answers, one per completion (the dataset column).
    * ``strict=True`` reads the last ``<answer>…</answer>`` block; ``strict=False`` the
      last number in the text (GSM8K style; easier to hack, see chapter 3).

    Equality is :func:`grpo_lib.parsing.answers_equal`: exact for plain numbers
    (``14 == 14.0 == " 14 " == "１４"``), ``math_verify`` for short LaTeX
    (``\frac{1}{2} == 0.5``), digit-string comparison for integers too long for
    ``int()``; an expression such as ``2 + 12`` is not accepted as the answer 14.
    Floor: 0.0.
    """
    texts = _texts(completions, "accuracy_reward")
    correct = _correct(texts, answer, strict, "accuracy_reward")
    return [1.0 if ok else 0.0 for ok in correct]


def answer_anywhere_reward(completions: list[str], answer: Sequence | None = None,
                           **kwargs) -> list[float]:
    r"""A grader with a loophole, on purpose (chapter 9): 1.0 when the gold answer's
    text occurs *anywhere* in the completion, the check ``str(answer) in completion``.

    .. math:: r_i = \mathbb{1}\left[a_i \text{ is a substring of } y_i\right]

    It pays every right answer, and also a wrong one whose trace happens to contain
    the gold number (``14`` inside ``140``, or as an intermediate result), so those
    wrong answers are reinforced too: chapter 9 trains on it and measures the cost.
    Train on :func:`accuracy_reward` instead. Floor: 0.0.
    """
    fn = "answer_anywhere_reward"
    texts = _texts(completions, fn)
    answer = _column(answer, "answer", len(texts), fn, "['14']")
    return [float(isinstance(t, str) and str(a).strip() != "" and str(a).strip() in t)
            for t, a in zip(texts, answer)]


def signed_accuracy_reward(completions: list[str], answer: Sequence | None = None,
                           wrong_score: float = -1.0, **kwargs) -> list[float]:
    r"""A grader with a loophole, on purpose (chapter 9): +1 for a right answer,
    ``wrong_score`` (-1) for a wrong one, and 0 when there is no ``<answer>`` block.

    .. math:: r_i = \begin{cases} +1 & \operatorname{extract}(y_i) = a_i \\
       w & \text{an answer, wrong} \\ 0 & \text{no answer} \end{cases}

    Penalising wrong answers is meant to discourage guessing; scoring a missing
    answer above a wrong one pays the policy for not answering: on a prompt it gets
    right with probability :math:`p`, answering earns :math:`p + (1 - p) w` on
    average, less than not answering when :math:`p < -w / (1 - w)` (1/2 for
    :math:`w = -1`, 2/3 for :math:`w = -2`). Chapter 9 trains on it. Score a missing
    answer at least as low as a wrong one (:func:`accuracy_reward` gives both 0).
    Range: [``wrong_score``, 1]; a non-text completion has no answer and gets 0.0,
    the loophole itself.
    """
    fn = "signed_accuracy_reward"
    if not (math.isfinite(wrong_score) and wrong_score <= 0):
        raise ValueError(f"{fn}: wrong_score must be a finite number <= 0 (a penalty), "
                         f"got {wrong_score!r}")
    texts = _texts(completions, fn)
    correct = _correct(texts, answer, True, fn)
    return [1.0 if ok else (0.0 if extract_answer(t, strict=True) is None
                            else float(wrong_score))
            for t, ok in zip(texts, correct)]


# -------------------------------------------------------------------------- countdown
def _has_block(text: str, open_tag: str, close_tag: str) -> bool:
    start = text.find(open_tag)
    return start >= 0 and text.find(close_tag, start + len(open_tag)) >= 0


def countdown_format_reward(completions: list[str], response_prefix: str = "",
                            **kwargs) -> list[float]:
    r"""GRPO-Zero's Countdown format score, with partial credit.

    .. math:: r = \begin{cases} 1 & \text{strict format (as } \texttt{format\_reward)}
       \\ 0.1\,\mathbb{1}[\text{think block}] + 0.5\,\mathbb{1}[\text{answer block}]
       & \text{otherwise} \end{cases}

    ``response_prefix`` is prepended before checking: GRPO-Zero's prompt ends with
    ``"<think>"``, so the model's text starts inside the think block and GRPO-Zero
    checks ``"<think>" + response``. Floor: 0.0.
    """
    scores = []
    for text in _texts(completions, "countdown_format_reward"):
        if text is None:
            scores.append(0.0)
            continue
        text = (response_prefix or "") + text
        if is_well_formatted(text, strict=True):
            scores.append(1.0)
        else:
            scores.append(0.1 * _has_block(text, THINK_OPEN, THINK_CLOSE)
                          + 0.5 * _has_block(text, ANSWER_OPEN, ANSWER_CLOSE))
    return scores


def _as_fraction(value: Any, name: str, fn: str) -> Fraction:
    try:
        if isinstance(value, float):
            return Fraction(repr(value))
        if isinstance(value, str):  # '1e100000000' would make 10**100000000
            return Fraction(_bounded_number_text(value.strip()))
        return Fraction(int(value))
    except (TypeError, ValueError, ZeroDivisionError):
        raise ValueError(
            f"{fn}: {name} entry {value!r} is not a number; pass integers, e.g. "
            "numbers=[[45, 43, 83, 38]], target=[33]") from None


def countdown_answer_reward(completions: list[str], numbers: Sequence | None = None,
                            target: Sequence | None = None, **kwargs) -> list[float]:
    r"""1.0 when the answer is an expression using each given number exactly once and
    evaluating to the target, else 0.0.

    .. math:: r = \mathbb{1}\big[\operatorname{sorted}(\text{literals}(e)) =
       \operatorname{sorted}(\text{numbers})\big] \cdot
       \mathbb{1}\big[\operatorname{eval}(e) = \text{target}\big]

    ``e`` is the text of the last ``<answer>`` block (unicode digits read as ASCII),
    evaluated by :func:`grpo_lib.safe_math.safe_eval` — an AST whitelist of numbers,
    ``+ - * /``, unary minus and parentheses, never ``eval`` — in exact rational
    arithmetic (GRPO-Zero compares floats within 1e-5; exact arithmetic needs no
    tolerance). Repeated or missing numbers, a decimal literal, division by zero,
    ``9**9**9**9``, 5,000 nested parentheses: all 0.0, in microseconds. Floor: 0.0.
    """
    fn = "countdown_answer_reward"
    texts = _texts(completions, fn)
    numbers = _column(numbers, "numbers", len(texts), fn, "[[45, 43, 83, 38]]")
    target = _column(target, "target", len(texts), fn, "[33]")
    return [float(countdown_verdict(text, given, goal) == "correct")
            for text, given, goal in zip(texts, numbers, target)]


def countdown_value_only_reward(completions: list[str], target: Sequence | None = None,
                                **kwargs) -> list[float]:
    r"""What a checker that only evaluates the answer would pay: 1.0 when the
    answer's value is the target, *whatever numbers it uses*. Do not train on it.

    .. math:: r = \mathbb{1}\big[\operatorname{eval}(e) = \text{target}\big]

    A monitor: give it weight 0 in ``reward_weights`` and ``metrics.csv`` logs, at
    every step, how often the policy's answers would have been paid by this checker;
    minus :func:`countdown_answer_reward` that is the share of answers that reach the
    target by dropping, reusing or inventing a number (the reward hack the
    numbers check blocks). Floor: 0.0.
    """
    fn = "countdown_value_only_reward"
    texts = _texts(completions, fn)
    target = _column(target, "target", len(texts), fn, "[33]")
    goals = [_as_fraction(goal, "target", fn) for goal in target]
    return [float(_countdown_answer(text)[2] == goal)
            for text, goal in zip(texts, goals)]


COUNTDOWN_VERDICTS = ("correct", "no_answer", "not_an_expression",
                      "wrong_numbers_hits_target", "wrong_numbers", "wrong_value")
"""What :func:`countdown_verdict` can say. ``wrong_numbers_hits_target`` is the
reward hack: the value is the target, but a number is dropped, reused or invented,
so a checker that only evaluates the expression would pay it."""


def _countdown_answer(text: str | None) -> tuple[str, list[Fraction], Fraction | None]:
    """``(status, sorted literals, value)`` of the last strict ``<answer>`` block;
    status ``"ok"``, ``"no_answer"`` or ``"not_an_expression"`` (then no value)."""
    expression = extract_answer(text, strict=True) if isinstance(text, str) else None
    if not expression:
        return "no_answer", [], None
    if "." in expression:  # decimals are never the given integers
        return "not_an_expression", [], None
    try:
        expression = normalize_digits(expression)
        return "ok", sorted(expression_literals(expression)), safe_eval(expression)
    except ExpressionError:
        return "not_an_expression", [], None


def countdown_verdict(text: str | None, numbers: Sequence, target) -> str:
    """Why a Countdown answer scores what it scores: one of
    :data:`COUNTDOWN_VERDICTS`, checked in that order after the answer is found.

    ``text`` is a completion; its last strict ``<answer>`` block is the expression.
    Decimals, ``**``, names, calls or overlong input are ``not_an_expression`` (the
    safe evaluator refuses them in microseconds). ``numbers`` and ``target`` are the
    problem's; a malformed entry raises a ``ValueError``/``TypeError`` that says what
    to pass.
    """
    fn = "countdown_answer_reward"
    wanted = sorted(_given_numbers(numbers, fn))
    goal = _as_fraction(target, "target", fn)
    status, used, value = _countdown_answer(text)
    if status != "ok":
        return status
    if used != wanted:
        return "wrong_numbers_hits_target" if value == goal else "wrong_numbers"
    return "correct" if value == goal else "wrong_value"


def countdown_reward(completions: list[str], numbers: Sequence | None = None,
                     target: Sequence | None = None, format_weight: float = 0.1,
                     response_prefix: str = "", **kwargs) -> list[float]:
    r"""GRPO-Zero's Countdown reward:
    :math:`r = 0.1\,r_\text{format} + r_\text{answer}`.

    :func:`countdown_format_reward` (1, or 0.1/0.5 partial credit) weighted by
    ``format_weight`` plus :func:`countdown_answer_reward` (0 or 1). The best score is
    1.1, the floor 0.0. Example: numbers ``[45, 43, 83, 38]``, target 33,
    ``"<think> … </think>\n<answer>83-45-43+38</answer>"`` scores 1.1.
    """
    fmt = countdown_format_reward(completions, response_prefix=response_prefix)
    ans = countdown_answer_reward(completions, numbers=numbers, target=target)
    return [format_weight * f + a for f, a in zip(fmt, ans)]


# ----------------------------------------------------------------------------- language
_LANGUAGE_SCRIPT = {"en": "latin", "zh": "cjk"}


def language_consistency_reward(completions: list[str], language: str | Sequence = "en",
                                **kwargs) -> list[float]:
    r"""Share of the reasoning written in the target language (DeepSeek-R1's
    language-consistency reward, DeepSeek-AI 2025).

    .. math:: r = \frac{u_\text{target}}{u_\text{latin} + u_\text{cjk} + u_\text{other}}

    counted on the reasoning (the think block; if there is none, the whole completion
    without its tags) in *language units* (:func:`grpo_lib.parsing.script_counts`): one
    unit per Latin word, one per CJK character, one per word of any other alphabet.
    ``"en"`` counts Latin words as on-target, ``"zh"`` CJK characters. Digits and
    symbols belong to no language: a reasoning made only of them
    (``"2 + 3 = 5, 5 * 4 = 20"``) is consistent with every language and scores 1.0 —
    which is how chapter 1's example gives o1 a full language reward. Script is a proxy
    for language: French scores 1.0 for "en".

    ``language`` is one code for all completions or a column with one per completion.
    Floor: 0.0 (no text, or a blank reasoning).
    """
    fn = "language_consistency_reward"
    texts = _texts(completions, fn)
    if isinstance(language, str):
        languages = [language] * len(texts)
    else:
        languages = _column(language, "language", len(texts), fn, '["en", "zh"]')
    scores = []
    for text, code in zip(texts, languages):
        if code not in _LANGUAGE_SCRIPT:
            raise ValueError(f"{fn}: unknown language {code!r}; supported: "
                             f"{sorted(_LANGUAGE_SCRIPT)}")
        reasoning = think_text(text)
        if reasoning is None and text is not None:  # no think block: the whole text
            for tag in (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE):
                text = text.replace(tag, " ")
            reasoning = text
        if not reasoning or not reasoning.strip():
            scores.append(0.0)
            continue
        counts = script_counts(reasoning)
        total = sum(counts.values())
        scores.append(1.0 if total == 0 else counts[_LANGUAGE_SCRIPT[code]] / total)
    return scores


# ----------------------------------------------------------------------------- steps
_STEP_MARKER = re.compile(
    r"Step [0-9]+:|^[0-9]+\.|\n-|\n\*|First,|Second,|Next,|Finally,", re.MULTILINE
)


def reasoning_steps_reward(completions: list[str], min_steps: int = 3,
                           **kwargs) -> list[float]:
    r"""Open-R1's step-by-step reward: :math:`r = \min(1, k / \text{min\_steps})`, with
    :math:`k` the number of step markers.

    Markers: ``"Step 1:"``, a numbered line ``"1."``, a bullet ``"\n-"``/``"\n*"``,
    and the words ``First,``/``Second,``/``Next,``/``Finally,``. (Open-R1 forgets
    ``re.MULTILINE``, so its ``^\d+\.`` only matches at the very start; here it
    matches every line.) Note what it does *not* count: chapter 1's
    ``"3 * 4 = 12, 2 + 12 = 14"`` has two steps and scores 0 — a reward written for
    one output style. Floor: 0.0.
    """
    if not min_steps >= 1:  # NaN too: every trace would get the full reward
        raise ValueError(f"min_steps must be >= 1 (steps for the full reward), "
                         f"got {min_steps}")
    return [0.0 if t is None else min(1.0, len(_STEP_MARKER.findall(t)) / min_steps)
            for t in _texts(completions, "reasoning_steps_reward")]


# ----------------------------------------------------------------------------- length
def _groups(n: int, num_generations: int | None, fn: str) -> list[range]:
    size = n if num_generations is None else num_generations
    if not isinstance(size, int) or size < 1 or (n and n % size):
        raise ValueError(
            f"{fn}: num_generations={num_generations!r} must be a positive integer "
            f"that divides the number of completions ({n}); completions are ordered "
            "group by group ([p0]*G + [p1]*G + ...)"
        )
    return [range(start, start + size) for start in range(0, n, size)] if n else []


def length_reward(completions: list[str], answer: Sequence | None = None,
                  num_generations: int | None = None, strict: bool = True,
                  completion_ids: Sequence | None = None, **kwargs) -> list[float]:
    r"""Kimi 1.5's length reward (Kimi Team 2025), computed within each group.

    .. math:: \lambda_i = 0.5 - \frac{\text{len}_i - \text{min\_len}}
       {\text{max\_len} - \text{min\_len}}, \qquad
       r_i = \begin{cases} \lambda_i & \text{answer } i \text{ correct} \\
       \min(0, \lambda_i) & \text{wrong} \end{cases}

    with min/max over the :math:`G` completions of the same prompt; if they all have the
    same length every reward is 0. Short correct answers earn up to +0.5, long ones down
    to −0.5; wrong answers are never rewarded for brevity.

    * ``num_generations`` — the group size :math:`G` (groups are contiguous). ``None``
      treats the whole list as one group, which is what Open-R1's version does with the
      whole batch TRL hands it — pass ``num_generations`` to get per-prompt groups.
    * Lengths are tokens if ``completion_ids`` (a list of token-id lists, as TRL passes
      it) is given, else characters. A non-text completion counts as wrong, length 0.

    Range: [−0.5, 0.5]; floor −0.5.
    """
    fn = "length_reward"
    texts = _texts(completions, fn)
    correct = _correct(texts, answer, strict, fn)
    lengths = _lengths(texts, completion_ids, fn)
    rewards = [0.0] * len(texts)
    for group in _groups(len(texts), num_generations, fn):
        lo = min(lengths[i] for i in group)
        hi = max(lengths[i] for i in group)
        if hi == lo:
            continue
        for i in group:
            lam = 0.5 - (lengths[i] - lo) / (hi - lo)
            rewards[i] = lam if correct[i] else min(0.0, lam)
    return rewards


def cosine_scaled_reward(completions: list[str], answer: Sequence | None = None,
                         min_value_wrong: float = -1.0, max_value_wrong: float = -0.5,
                         min_value_correct: float = 0.5, max_value_correct: float = 1.0,
                         max_len: int = 1000, strict: bool = True,
                         completion_ids: Sequence | None = None,
                         **kwargs) -> list[float]:
    r"""Open-R1's cosine length scaling (Yeo et al. 2025): short correct answers earn
    most, short wrong answers lose most.

    .. math:: r = r_\text{end} + \tfrac12 (r_\text{start} - r_\text{end})
       \left(1 + \cos\!\left(\pi \min(1, L / L_\text{max})\right)\right)

    where for a correct answer :math:`(r_\text{start}, r_\text{end}) =`
    (``max_value_correct``, ``min_value_correct``) and for a wrong one
    (``min_value_wrong``, ``max_value_wrong``). At :math:`L = 0` the reward is
    :math:`r_\text{start}`, at :math:`L \ge L_\text{max}` it is :math:`r_\text{end}`.
    (Open-R1 does not clip :math:`L/L_\text{max}`, so past ``max_len`` its cosine turns
    back; here it is clipped at 1.) Length :math:`L` is tokens if ``completion_ids`` is
    given, else characters. Floor: ``min_value_wrong`` (a non-text completion).
    """
    fn = "cosine_scaled_reward"
    if not 0 < max_len < math.inf:  # NaN too
        raise ValueError(f"{fn}: max_len must be positive, got {max_len}")
    texts = _texts(completions, fn)
    correct = _correct(texts, answer, strict, fn)
    lengths = _lengths(texts, completion_ids, fn)
    rewards = []
    for length, ok in zip(lengths, correct):
        cosine = math.cos(math.pi * min(1.0, length / max_len))
        start, end = ((max_value_correct, min_value_correct) if ok
                      else (min_value_wrong, max_value_wrong))
        rewards.append(end + 0.5 * (start - end) * (1.0 + cosine))
    return rewards


# ------------------------------------------------------------------------- repetition
def repetition_penalty_reward(completions: list[str], ngram_size: int = 3,
                              max_penalty: float = -1.0, **kwargs) -> list[float]:
    r"""Open-R1's n-gram repetition penalty (Yeo et al. 2025, appendix C.2).

    .. math:: r = \text{max\_penalty} \cdot \left(1 - \frac{\#\text{distinct n-grams}}
       {\#\text{n-grams}}\right)

    over lower-cased whitespace-separated words (:func:`grpo_lib.parsing.
    repeated_ngram_fraction`). 0 for text without repeats or with fewer than
    ``ngram_size`` words; approaches ``max_penalty`` (the floor) for a loop. Text
    without spaces (Chinese) is one "word" and is not penalised.
    """
    if max_penalty > 0:
        raise ValueError(f"max_penalty must be <= 0 (it is a penalty), "
                         f"got {max_penalty}")
    fractions = [repeated_ngram_fraction(t, ngram_size) if t else 0.0
                 for t in _texts(completions, "repetition_penalty_reward")]
    return [max_penalty * f if f else 0.0 for f in fractions]  # 0.0, never -0.0


def length_bonus_reward(completions: list[str], max_tokens: int = 96,
                        completion_ids: Sequence | None = None,
                        **kwargs) -> list[float]:
    r"""A well-meant "think longer" bonus: :math:`r = \min(1, L / L_\text{max})`.

    :math:`L` is the completion's length in tokens if ``completion_ids`` is given
    (the trainer and TRL pass it), else in characters. Chapter 9 adds it at weight 0.1
    to the accuracy and format rewards and trains on it: within a group whose answers
    are all right it is the only difference between the rewards, and the group's
    standardisation turns that 0.1 into the whole advantage. Floor: 0.0.
    """
    fn = "length_bonus_reward"
    if not 1 <= max_tokens < math.inf:  # NaN too: every completion got the bonus
        raise ValueError(f"{fn}: max_tokens must be >= 1, got {max_tokens}")
    texts = _texts(completions, fn)
    lengths = _lengths(texts, completion_ids, fn)
    return [0.0 if t is None else min(1.0, n / max_tokens)
            for t, n in zip(texts, lengths)]


def soft_overlong_punishment(completions: list[str], max_completion_len: int = 512,
                             soft_punish_cache: int = 128,
                             completion_ids: Sequence | None = None,
                             **kwargs) -> list[float]:
    r"""DAPO's soft overlong punishment (Yu et al. 2025, eq. 13).

    .. math:: R_\text{length}(y) = \begin{cases}
       0 & |y| \le L_\text{max} - L_\text{cache} \\
       \dfrac{(L_\text{max} - L_\text{cache}) - |y|}{L_\text{cache}}
       & L_\text{max} - L_\text{cache} < |y| \le L_\text{max} \\
       -1 & L_\text{max} < |y| \end{cases}

    :math:`L_\text{max}` = ``max_completion_len``, :math:`L_\text{cache}` =
    ``soft_punish_cache`` (TRL's names). DAPO measures :math:`|y|` in tokens: pass
    ``completion_ids`` (TRL does) to do the same; without it :math:`|y|` is the number
    of characters. Added to the task reward, it ramps from 0 to −1 over the last
    ``soft_punish_cache`` units. Floor: −1.0.
    """
    fn = "soft_overlong_punishment"
    if not 0 < soft_punish_cache < max_completion_len:
        raise ValueError(f"{fn}: need 0 < soft_punish_cache < max_completion_len, got "
                         f"{soft_punish_cache} and {max_completion_len}")
    texts = _texts(completions, fn)
    start = max_completion_len - soft_punish_cache
    rewards = []
    for length in _lengths(texts, completion_ids, fn):
        if length <= start:
            rewards.append(0.0)
        elif length <= max_completion_len:
            rewards.append((start - length) / soft_punish_cache)
        else:
            rewards.append(-1.0)
    return rewards


# -------------------------------------------------------------------------- composing
def reward_name(fn: Callable) -> str:
    """A readable name for logs: ``__name__``, or ``func(k=v)`` for a partial."""
    if isinstance(fn, functools.partial):
        params = ", ".join(f"{k}={v!r}" for k, v in fn.keywords.items())
        return f"{reward_name(fn.func)}({params})"
    return getattr(fn, "__name__", None) or type(fn).__name__


def with_params(fn: RewardFunction, name: str | None = None,
                **params) -> RewardFunction:
    """``fn`` with some keyword parameters fixed, under a readable ``__name__``.

    ``with_params(cosine_scaled_reward, max_len=200)`` logs as
    ``"cosine_scaled_reward(max_len=200)"``; pass ``name=`` to choose another.
    """
    bound = functools.partial(fn, **params)

    def reward(completions: list[str], **columns) -> list[float]:
        return bound(completions, **columns)

    reward.__name__ = reward.__qualname__ = name or reward_name(bound)
    reward.__doc__ = fn.__doc__
    reward.__wrapped__ = fn
    return reward


class CombinedReward:
    r"""A weighted sum of reward functions, :math:`r_i = \sum_k w_k\, r_k(y_i)`, that
    keeps each function's scores.

    * ``combined(completions, **columns)`` -> the weighted sums (a reward function);
    * ``combined.breakdown(completions, **columns)`` -> ``{name: scores}`` unweighted;
    * ``combined.last_breakdown`` — the breakdown of the latest call (for logging).

    ``None`` returned by a function (TRL's "not applicable") becomes NaN in the
    breakdown and counts as 0 in the sum (TRL's ``nansum``); a sample for which every
    function returns NaN gets NaN.
    """

    def __init__(self, funcs: Sequence[RewardFunction],
                 weights: Sequence[float] | None = None):
        funcs = list(funcs)
        if not funcs or not all(callable(f) for f in funcs):
            raise TypeError(f"combine_rewards needs a non-empty list of reward "
                            f"functions, got {funcs!r:.120}")
        weights = [1.0] * len(funcs) if weights is None else [float(w) for w in weights]
        if len(weights) != len(funcs):
            raise ValueError(f"combine_rewards: {len(funcs)} functions but "
                             f"{len(weights)} weights; pass one weight per function")
        if not all(map(math.isfinite, weights)):  # a NaN weight dropped its term
            raise ValueError(f"combine_rewards: weights {weights}; each must be a "
                             "finite number")
        self.funcs, self.weights = funcs, weights
        self.names: list[str] = []
        for f in funcs:
            name, k = reward_name(f), 2
            while name in self.names:
                name, k = f"{reward_name(f)}#{k}", k + 1
            self.names.append(name)
        terms = " + ".join(f"{w:g}*{n}" for w, n in zip(weights, self.names))
        self.__name__ = f"combined({terms})"
        self.last_breakdown: dict[str, list[float]] = {}

    def breakdown(self, completions: list[str], **columns) -> dict[str, list[float]]:
        """Each function's unweighted scores, ``{name: [float, ...]}``."""
        result = {}
        for name, f in zip(self.names, self.funcs):
            scores = f(completions, **columns)
            if scores is None or len(scores) != len(completions):
                got = "None" if scores is None else len(scores)
                raise ValueError(f"reward function {name} returned {got} scores for "
                                 f"{len(completions)} completions; it must return one "
                                 "each")
            result[name] = [math.nan if s is None else float(s) for s in scores]
        return result

    def __call__(self, completions: list[str], **columns) -> list[float]:
        self.last_breakdown = self.breakdown(completions, **columns)
        totals = []
        for i in range(len(completions)):
            terms = [w * self.last_breakdown[n][i]
                     for n, w in zip(self.names, self.weights)]
            finite = [t for t in terms if not math.isnan(t)]
            totals.append(math.fsum(finite) if finite else math.nan)
        return totals

    def __repr__(self) -> str:
        return f"<{self.__name__}>"


def combine_rewards(funcs: Sequence[RewardFunction],
                    weights: Sequence[float] | None = None) -> CombinedReward:
    r"""Compose reward functions: :math:`r = \sum_k w_k r_k` (weights default to 1).

    ``combine_rewards([accuracy_reward, format_reward], [1.0, 0.1])`` is R1-Zero's
    accuracy + 0.1·format; on chapter 1's o1..o4 it gives 0.1, 1.1, 1.0, 0.1. The
    result is a :class:`CombinedReward`: call it like any reward function, and use
    ``.breakdown(...)`` or ``.last_breakdown`` to log each function separately.
    """
    return CombinedReward(funcs, weights)


def countdown_worked_answer_reward(completions: list[str],
                                   numbers: Sequence | None = None,
                                   target: Sequence | None = None,
                                   **kwargs) -> list[float]:
    r""":func:`countdown_answer_reward`, paid only when the work shows the answer:
    every step ``a op b = c`` the response writes is right, and the last one reaches
    the target.

    .. math:: r = r_\text{answer} \cdot \mathbb{1}\big[\text{all steps right}\big]
       \cdot \mathbb{1}\big[c_\text{last} = \text{target}\big]

    An answer-only reward also pays a lucky answer after wrong work (``4 * 12 = 88,
    88 - 4 = 84.`` then ``(4 * 12) - 4``), and training on it teaches the policy that
    the work does not matter. Steps are read by
    :func:`grpo_lib.tasks.countdown.worked_steps`, never evaluated; an ``=`` it
    cannot read as a step (``4 *  12 = 88``, ``12 ÷ 4 = 3``, ``5 - 8 = -3``) is
    work not shown, so the reward is 0. Floor: 0.0.
    """
    from .tasks.countdown import worked_steps

    answers = countdown_answer_reward(completions, numbers=numbers, target=target)
    texts = _texts(completions, "countdown_worked_answer_reward")
    goals = _column(target, "target", len(texts), "countdown_worked_answer_reward",
                    "[33]")
    out = []
    for paid, text, goal in zip(answers, texts, goals):
        steps = worked_steps(text) if paid else []  # only a right answer is read
        shown = (bool(steps) and all(ok for *_, ok in steps)
                 and text.count("=") == len(steps)  # every "=" closes a step read
                 and Fraction(steps[-1][3]) == _as_fraction(
                     goal, "target", "countdown_worked_answer_reward"))
        out.append(1.0 if shown else 0.0)
    return out


def countdown_repeat_penalty(completions: list[str], max_penalty: float = -1.0,
                             **kwargs) -> list[float]:
    r"""A penalty for working out the same Countdown attempt twice.

    .. math:: r = \text{max\_penalty} \cdot
       \frac{\#\text{attempts} - \#\text{distinct attempts}}{\#\text{attempts}}

    An attempt is a sentence of the reasoning (the text before ``</think>``, all of
    it when the completion was cut off) that works out at least one step; two
    attempts are the same when they work the same steps ``a op b`` in the same order,
    whatever results they write. A trained policy that writes an attempt it has
    already missed spends its token budget without a new chance (chapter 17). 0.0 for
    text without repeats or without attempts; the floor approaches ``max_penalty``.
    """
    from .tasks.countdown import attempts_of

    if max_penalty > 0:
        raise ValueError(f"max_penalty must be <= 0 (it is a penalty), "
                         f"got {max_penalty}")
    out = []
    for text in _texts(completions, "countdown_repeat_penalty"):
        attempts = [tuple((a, op, b) for a, op, b, *_ in steps)
                    for steps in attempts_of(text)]  # the steps worked, not results
        repeats = len(attempts) - len(set(attempts))
        out.append(max_penalty * repeats / len(attempts) if repeats else 0.0)
    return out


def countdown_sound_attempt_reward(completions: list[str],
                                   numbers: Sequence | None = None,
                                   **kwargs) -> list[float]:
    r"""The share of a response's Countdown attempts that are sound work.

    .. math:: r = \frac{\#\text{sound attempts}}{\#\text{attempts}}

    Attempts are read by :func:`grpo_lib.tasks.countdown.attempts_of` (the sentences
    of the reasoning that work out a step; a sentence cut off by the token budget
    counts too). One is sound (:func:`~grpo_lib.tasks.countdown.attempt_is_sound`)
    when every step is right, each step continues from the result before it or
    retries the step before it with another operator, and it brings in each given
    number exactly once: work that would answer the problem had it reached the
    target. Unlike a reward on the answer, it pays for keeping the numbers and the
    arithmetic right in every attempt, on problems no sample of the group solves too
    (chapter 17). A share, not a count, so more attempts are not paid for in
    themselves; but a response cut off by the budget ends in an unfinished attempt,
    which is not sound, so the share pays for stopping early, and chapter 17 measures
    what that costs. 0.0 without attempts; the range is [0, 1].
    """
    from .tasks.countdown import attempt_is_sound, attempts_of

    fn = "countdown_sound_attempt_reward"
    texts = _texts(completions, fn)
    numbers = _column(numbers, "numbers", len(texts), fn, "[[45, 43, 83, 38]]")
    out = []
    for text, given in zip(texts, numbers):
        given = _given_numbers(given, fn)
        attempts = attempts_of(text)
        sound = sum(attempt_is_sound(steps, given) for steps in attempts)
        out.append(sound / len(attempts) if attempts else 0.0)
    return out


def process_reward(completions: list[str], question: Sequence | None = None,
                   **kwargs) -> list[float]:
    r"""A process reward by rule for the arithmetic task: 1.0 when the reasoning has
    at least one step and every step is right, else 0.0.

    .. math:: r = \prod_{s \in \text{steps}} [\,s \text{ is right}\,]

    Steps and their grades are :func:`grpo_lib.test_time.step_labels`: each operation
    must be true and leave an expression with the problem's value, so a left-to-right
    trace loses the reward at its first wrong step even when its arithmetic holds,
    and a right answer reached through a false step earns nothing (chapter 15).
    """
    from .test_time import process_ok

    fn = "process_reward"
    texts = _texts(completions, fn)
    question = _column(question, "question", len(texts), fn, "['2 + 3 * 4']")
    return [float(process_ok(t, str(q))) for t, q in zip(texts, question)]


REWARD_FUNCTIONS: dict[str, RewardFunction] = {
    f.__name__: f for f in (
        format_reward, soft_format_reward, accuracy_reward, answer_anywhere_reward,
        signed_accuracy_reward, countdown_format_reward,
        countdown_answer_reward, countdown_reward, countdown_value_only_reward,
        countdown_worked_answer_reward, countdown_repeat_penalty,
        countdown_sound_attempt_reward, language_consistency_reward,
        reasoning_steps_reward, length_reward,
        cosine_scaled_reward, length_bonus_reward, repetition_penalty_reward,
        soft_overlong_punishment, process_reward,
    )
}
"""Every reward function by name, for configs: ``REWARD_FUNCTIONS["format_reward"]``."""


def _bounded_number_text(text: str) -> str:
    """``text`` when it is a plain number of at most 40 characters (``"33"``,
    ``"-2.5"``, ``"7/2"``), which :class:`fractions.Fraction` reads at once; a
    ValueError otherwise (an exponent such as ``"1e100000000"`` is refused)."""
    if len(text) > 40 or not re.fullmatch(r"[+-]?\d+(?:\.\d*)?(?:/\d+)?", text):
        raise ValueError(f"not a plain number: {text[:50]!r}")
    return text


def _given_numbers(numbers: Any, fn: str) -> list[Fraction]:
    """One problem's ``numbers`` entry as exact fractions; a TypeError that says what
    to pass when the entry is not a list (a string, a lone number, ``None``)."""
    if isinstance(numbers, (str, bytes)) or not hasattr(numbers, "__iter__"):
        raise TypeError(f"{fn}: each numbers entry must be a list of integers, got "
                        f"{numbers!r:.60}; e.g. numbers=[[45, 43, 83, 38]]")
    return [_as_fraction(n, "numbers", fn) for n in numbers]


def reward_model_reward(completions: list[str], **columns) -> list[float]:
    """A learned reward (chapter 13): the scores of the reward model at ``path``, see
    :func:`grpo_lib.reward_model.reward_model_reward` (imported on first use)."""
    from .reward_model import reward_model_reward as score

    return score(completions, **columns)


LEARNED_REWARDS: dict[str, RewardFunction] = {
    "reward_model_reward": reward_model_reward}
"""Rewards that a trained model computes, by name, for configs (they need a ``path``
and are not rules, so :data:`REWARD_FUNCTIONS` leaves them out)."""
