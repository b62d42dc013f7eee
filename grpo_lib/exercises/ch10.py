"""Checkers for chapter 10 (cold start). Solutions: book/solutions/ch10.md."""
from __future__ import annotations

from functools import lru_cache
from numbers import Integral

import numpy as np
import pandas as pd

from ..logprobs import assistant_mask
from ..tasks.arithmetic import DATA_DIR

_TOKENIZER_DIR = DATA_DIR.parents[1] / "data" / "models" / "tiny-qwen2-base"


# ======================================================================================
# 10.1 The assistant mask, read off the tokens
# ======================================================================================
@lru_cache(maxsize=1)
def _tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_TOKENIZER_DIR)


def _conversations() -> list[tuple[str, list[dict]]]:
    trace = "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>"
    return [
        ("one question, one answer",
         [{"role": "user", "content": "What is 2 + 3 * 4?"},
          {"role": "assistant", "content": trace}]),
        ("a system message first",
         [{"role": "system", "content": "Answer in English."},
          {"role": "user", "content": "What is 5 - 1?"},
          {"role": "assistant", "content": "<think> 5 - 1 = 4 </think> "
                                           "<answer> 4 </answer>"}]),
        ("two rounds; the answers mention the user and hold a newline",
         [{"role": "user", "content": "What is 2 * 2?"},
          {"role": "assistant", "content": "<think> the user asks 2 * 2 = 4\n</think> "
                                           "<answer> 4 </answer>"},
          {"role": "user", "content": "And 2 + 3 * 4?"},
          {"role": "assistant", "content": trace}]),
    ]


def _mask_cases() -> list[tuple[str, list[str], list[int]]]:
    """(name, token strings, the library's mask) for each test conversation."""
    tok = _tokenizer()
    cases = []
    for name, messages in _conversations():
        ids, mask = assistant_mask(tok, messages)  # [T], [T]
        cases.append((name, tok.convert_ids_to_tokens(ids.tolist()), mask.tolist()))
    return cases


def _mask_hint(tokens: list[str], expected: list[int], got: list[int]) -> str:
    """A direction for the most common mistakes."""
    wrong = [t for t in range(len(tokens)) if got[t] != expected[t]]
    if all(tokens[t] == "<|im_end|>" and expected[t] == 1 for t in wrong):
        return (" The assistant's <|im_end|> is a target too: it is how the model "
                "learns to stop.")
    if all(tokens[t] == "Ċ" and expected[t] == 0 for t in wrong):
        return (" A newline the template writes (after the role name, after "
                "<|im_end|>) is not the assistant's text.")
    if any(expected[t] == 0 and got[t] == 1 for t in wrong):
        return (" Some prompt tokens are marked: only the content of assistant turns "
                "(and their <|im_end|>) may be 1; role headers and user turns are 0.")
    return " Some of the assistant's tokens are missing."


def check_assistant_mask(fn) -> bool:
    """Check ``fn(tokens: list[str]) -> list[int]`` against
    :func:`grpo_lib.logprobs.assistant_mask`.

    ``tokens`` are the token strings of a ChatML conversation (``Ċ`` is a newline,
    ``Ġ`` a space); the mask is 1 on each assistant turn's content and its closing
    ``<|im_end|>``, 0 everywhere else.
    """
    for name, tokens, expected in _mask_cases():
        raw = fn(list(tokens))
        try:
            got = [int(v) for v in raw]
        except (TypeError, ValueError):
            raise AssertionError(f"{name}: expected a list of 0/1, got {raw!r:.80}.") \
                from None
        if len(got) != len(tokens):
            raise AssertionError(f"{name}: {len(tokens)} tokens but {len(got)} mask "
                                 f"values; return one value per token.")
        if got == expected:
            continue
        shown = " ".join(f"{t}:{g}" for t, g in zip(tokens, got))
        raise AssertionError(
            f"{name}: the mask differs at positions "
            f"{[t for t in range(len(tokens)) if got[t] != expected[t]]}.\n"
            f"token:your_mask  {shown}\n{_mask_hint(tokens, expected, got)}")
    print("check_assistant_mask: correct on a system message, two rounds and an "
          "answer with a newline.")
    return True


# ======================================================================================
# 10.2 Normalise a trace
# ======================================================================================
_MALFORMED = [
    "3 * 4 = 12, 2 + 12 = 14, so 14",
    "<think> 3 * 4 = 12 </think> <answer> 14 </answer> Done.",
    "<think> 3 * 4 = 12 </think>",
    "<think>  </think> <answer> 14 </answer>",
]


def _trace_cases() -> list[str]:
    return [
        "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>",
        "<think>3 * 4 = 12,\n2 + 12 = 14</think>\n<answer>14</answer>",
        "  <think>\tFirst 6 * 9 = 54,   now 1 + 54.\n\nThen 1 + 54 = 55. </think>"
        "   <answer>  55 </answer>\n",
        "<think> 首先 7 + 8 = 15,\n现在 15 - 4. </think> <answer> 11 </answer>",
        "<think>5 - 1 = 4</think><answer>4</answer>",
    ]


def check_normalize_trace(fn) -> bool:
    """Check ``fn(text) -> str`` against
    :func:`grpo_lib.tasks.cold_start.normalize_trace`: the same tidy text for
    well-formatted traces, ``ValueError`` for malformed ones."""
    from ..tasks.cold_start import normalize_trace

    for text in _trace_cases():
        expected = normalize_trace(text)
        got = fn(text)
        if got == expected:
            continue
        hint = ""
        if isinstance(got, str) and "".join(got.split()) != "".join(text.split()):
            hint = (" Only whitespace may change: a character other than a space, tab "
                    "or newline was added or removed.")
        elif isinstance(got, str) and got == " ".join(text.split()):
            hint = (" Collapsing the runs of whitespace is not all: each tag gets one "
                    "space inside it and the two blocks one space between them.")
        raise AssertionError(f"for {text!r}\n expected {expected!r}\n got      "
                             f"{got!r}.{hint}")
    for text in _MALFORMED:
        try:
            got = fn(text)
        except ValueError:
            continue
        raise AssertionError(
            f"{text!r} is not one think block and one answer block, yet you returned "
            f"{got!r}. Raise ValueError: a tidy must not make a malformed trace look "
            f"well formatted (grpo_lib.parsing.is_well_formatted tells them apart).")
    print("check_normalize_trace: the same tidy traces as normalize_trace, and "
          "ValueError for malformed ones.")
    return True


# ======================================================================================
# 10.3 Steps to reach an accuracy, on a smoothed curve
# ======================================================================================
def reference_steps_to_reach(metrics: pd.DataFrame, column: str, threshold: float,
                             window: int) -> int | None:
    """The first ``step`` at which the mean of ``column`` over the last ``window``
    steps (that step included, full windows only) is at least ``threshold``.

    .. math:: s^* = \\min\\Big\\{s \\ge s_{\\text{window}} :
              \\tfrac{1}{w}\\sum_{j=s-w+1}^{s} a_j \\ge \\theta\\Big\\}
    """
    frame = metrics.sort_values("step")
    smooth = frame[column].rolling(window).mean()  # NaN until a full window
    reached = frame["step"][smooth >= threshold]
    return None if reached.empty else int(reached.iloc[0])


def _curve_cases() -> list[tuple[str, pd.DataFrame, float, int]]:
    rng = np.random.default_rng(3)
    steps = np.arange(1, 41)
    rising = np.clip(0.4 + 0.015 * steps + rng.normal(0, 0.08, 40), 0, 1)
    spike = np.full(30, 0.5)
    spike[1] = 1.0  # one lucky step early on
    flat = np.full(20, 0.6)
    exact = np.array([0.5, 0.5, 0.5, 1.0, 0.5, 1.0, 1.0, 1.0])  # exact in binary
    shuffled = pd.DataFrame({"step": steps, "accuracy": rising}).sample(
        frac=1.0, random_state=0)
    return [
        ("a noisy rising curve", pd.DataFrame({"step": steps, "accuracy": rising}),
         0.8, 5),
        ("one lucky step early on", pd.DataFrame({"step": np.arange(1, 31),
                                                  "accuracy": spike}), 0.65, 5),
        ("never reaches it", pd.DataFrame({"step": np.arange(1, 21),
                                           "accuracy": flat}), 0.7, 4),
        ("reaches it exactly (>=)", pd.DataFrame({"step": np.arange(10, 18),
                                                  "accuracy": exact}), 0.75, 2),
        ("rows not sorted by step", shuffled, 0.8, 5),
    ]


def _curve_hint(frame, column, threshold, window, got) -> str:
    ordered = frame.sort_values("step")
    smooth = ordered[column].rolling(window).mean()
    variants = {
        " Average only full windows: the first window-1 steps have no trailing mean "
        "yet.": ordered[column].rolling(window, min_periods=1).mean() >= threshold,
        " The window must end at the step (a trailing mean), not be centred on it: "
        "the future is not known at that step.":
            ordered[column].rolling(window, center=True).mean() >= threshold,
        " Use >= (reached or passed), not >.": smooth > threshold,
    }
    for hint, hit in variants.items():
        steps = ordered["step"][hit]
        if not steps.empty and int(steps.iloc[0]) == got:
            return hint
    positions = np.flatnonzero((smooth >= threshold).to_numpy())
    if len(positions) and got in (positions[0], positions[0] + 1):
        return " Return a value of the 'step' column, not a row position."
    unsorted = frame["step"][frame[column].rolling(window).mean() >= threshold]
    if not unsorted.empty and int(unsorted.iloc[0]) == got:
        return " Sort the rows by step before smoothing."
    return ""


def check_steps_to_reach(fn) -> bool:
    """Check ``fn(metrics, column, threshold, window) -> int | None`` (see
    :func:`reference_steps_to_reach`)."""
    for name, frame, threshold, window in _curve_cases():
        expected = reference_steps_to_reach(frame, "accuracy", threshold, window)
        got = fn(frame.copy(), "accuracy", threshold, window)
        if expected is None:
            if got is not None:
                hint = _curve_hint(frame, "accuracy", threshold, window, got)
                raise AssertionError(f"{name}: the smoothed curve never reaches "
                                     f"{threshold}, so expected None, got {got!r}."
                                     f"{hint}")
            continue
        if got is None or isinstance(got, bool) or not isinstance(got, Integral):
            raise AssertionError(f"{name}: expected the step {expected} (an int), "
                                 f"got {got!r}.")
        if int(got) != expected:
            hint = _curve_hint(frame, "accuracy", threshold, window, int(got))
            raise AssertionError(f"{name} (threshold {threshold}, window {window}): "
                                 f"expected step {expected}, got {got}.{hint}")
    print("check_steps_to_reach: correct (trailing full windows, >=, step values, "
          "unsorted rows, never -> None).")
    return True
