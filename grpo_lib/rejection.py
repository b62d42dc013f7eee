"""Rejection sampling: turn the RL checkpoint's own correct answers into SFT data.

DeepSeek-R1 (section 2.3.3) samples several responses per training prompt from the
reasoning-RL checkpoint, keeps only the correct ones, and filters out chains of thought
with mixed languages, long paragraphs and code blocks; about 600k reasoning samples
survive and go into the second round of supervised fine-tuning. Here the steps are:

1. :func:`sample_candidates` draws ``k`` completions per prompt (the paper does not
   say how many; the CLI's ``--k`` is 16) with the book's sampler and scores each one
   with the evaluation harness (:func:`grpo_lib.evaluation.score_completions`), so
   "correct" means exactly what it means in every accuracy number of the book;
2. :func:`apply_filters` keeps the candidates that pass every filter of
   :data:`DEFAULT_FILTERS`, in order, then optionally at most ``max_per_prompt`` per
   prompt, and returns a yield table that shows what each stage removed;
3. :func:`random_control` draws the same number of samples with no filter at all: SFT
   on it versus SFT on the kept samples measures what the filtering itself buys;
4. :func:`to_sft_rows` writes the kept samples as conversations in TRL's format
   (save them with :func:`grpo_lib.tasks.write_jsonl`).

Arithmetic traces have no paragraphs or code blocks. This task's unreadable answers
are traces with misspelt or invented words (``known_words``: every word is one of the
readable pattern the cold start taught, :func:`readable_words`), with a step that does
not hold (``steps_check_out``: every ``a op b = c`` written in the trace is true), that
loop (``repetitive``) or that run out of tokens (``truncated``); those filters stand in
for R1's.
"""
from __future__ import annotations

import argparse
import functools
import re
import time
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from .evaluation import build_prompts, score_groups
from .parsing import think_text
from .safe_math import safe_eval
from .sampling import generate

__all__ = [
    "FILTERS",
    "DEFAULT_FILTERS", "COUNTDOWN_FILTERS", "default_filters", "with_task_columns",
    "YIELD_COLUMNS",
    "score_candidates",
    "sample_candidates",
    "normalise_completion",
    "readable_words",
    "uses_known_words",
    "steps_check_out",
    "apply_filters",
    "cap_per_prompt",
    "random_control",
    "to_sft_rows",
    "rejection_sample_from_args",
    "add_rejection_parser",
]

SAMPLES_PER_PROMPT = 16
"""Samples drawn per prompt by default. R1 samples "multiple responses" per prompt and
keeps the correct, readable ones; the paper gives no number."""


def _is_true(column: pd.Series) -> pd.Series:
    """``column == True`` as a plain bool Series; a missing value counts as False."""
    return column.astype("boolean").fillna(False).astype(bool)


def normalise_completion(text: str) -> str:
    """The text two completions must share to count as duplicates: whitespace runs
    collapsed to one space, ends stripped, case folded.

    ``"<think> 1 + 1 = 2 </think>\\n<answer> 2 </answer>"`` and
    ``"<think>  1 + 1 = 2 </think> <answer> 2 </answer>"`` normalise to the same
    text."""
    return " ".join(str(text).split()).casefold()


@functools.lru_cache(maxsize=1)
def readable_words() -> frozenset[str]:
    """Every word of the readable pattern the cold start taught
    (:func:`grpo_lib.tasks.cold_start.annotate`), read off its traces for one problem
    of each order rule, plus the tags' names: ``{"First", "Then", "Check", ...}``."""
    from .tasks.cold_start import annotate

    examples = ("2 + 3", "2 + 3 - 4", "2 + 3 * 4", "(2 + 3) * 4", "(2 + 3) - 4")
    return frozenset(w for q in examples for w in _WORD.findall(annotate(q)))


_WORD = re.compile(r"[^\W\d_]+")  # a run of letters, in any script
_EQUATION = re.compile(r"(-?[(\d][\d\s+\-*/()]{0,200}?[\d)])\s*=\s*(-?\d+)(?!\d)")


def uses_known_words(text: str) -> bool:
    """True when every word of ``text`` is in :func:`readable_words` (a misspelt,
    invented or foreign word fails): ``"First 3 * 4 = 12"`` passes, ``"Cheheck: 4"``
    does not. Never raises."""
    known = readable_words()
    return all(w in known for w in _WORD.findall(str(text)))


def _holds(left: str, right: str) -> bool:
    """``left`` is an expression whose value is the integer ``right``."""
    try:
        return safe_eval(left) == int(right)
    except (ValueError, ArithmeticError):
        return False


def steps_check_out(text: str) -> bool:
    """True when the think block states at least one equation and every ``=`` in it
    closes an equation ``expression = integer`` that holds, e.g. ``3 * 4 = 12`` and
    ``14 - 12 = 2``. ``"Then 36 - 24 = 22"`` (false) and ``"Check: 6 1 = 6"`` (no
    operation) fail. Never raises."""
    think = think_text(text)
    if not think or "=" not in think:
        return False
    equations = _EQUATION.findall(think)
    return len(equations) == think.count("=") and all(
        _holds(left, right) for left, right in equations)


def _keep_unique(candidates: pd.DataFrame) -> pd.Series:
    """True for the first of each (prompt, normalised completion); False for repeats."""
    key = candidates["completion"].map(normalise_completion)
    return ~pd.DataFrame({"p": candidates["prompt_index"], "t": key}).duplicated()


FILTERS: dict[str, Callable[[pd.DataFrame], pd.Series]] = {
    # strict: the answer inside <answer>...</answer> equals the gold answer
    "correct": lambda c: _is_true(c["correct"]),
    # exactly <think> ... </think> <answer> ... </answer>, nothing around them
    "formatted": lambda c: _is_true(c["formatted"]),
    # no Chinese/Japanese/Korean characters mixed into the English trace
    "single_language": lambda c: ~_is_true(c["lang_mixed"]),
    # every word is a word of the readable pattern (no misspelt or invented word)
    "known_words": lambda c: c["completion"].map(uses_known_words).astype(bool),
    # every equation a op b = c written in the think block is true
    "steps_check_out": lambda c: c["completion"].map(steps_check_out).astype(bool),
    # at most REPETITION_THRESHOLD of the word trigrams repeat
    "non_repetitive": lambda c: ~_is_true(c["repetitive"]),
    # ended with a stop token; unknown (scored without `finished`) counts as ended
    "not_truncated": lambda c: ~_is_true(c["truncated"]),
    # one copy of each (prompt, normalised completion)
    "deduplicate": _keep_unique,
}
"""Each filter maps the candidates still in play to a bool Series: True = keep."""

DEFAULT_FILTERS = ("correct", "formatted", "single_language", "known_words",
                   "steps_check_out", "non_repetitive", "not_truncated", "deduplicate")
"""The filters :func:`apply_filters` runs, in this order."""

YIELD_COLUMNS = ["kept", "dropped", "kept / sampled", "kept / previous", "prompts"]
"""Columns of the yield table (one row per stage, the first is ``sampled``)."""

_REQUIRED_COLUMNS = ("prompt_index", "sample_index", "question", "answer",
                     "completion", "correct", "formatted", "lang_mixed", "repetitive",
                     "length", "truncated")


# ======================================================================================
# Sampling and scoring
# ======================================================================================
def _as_rows(rows) -> list[dict]:
    """A list of dicts from a list of dicts, a DataFrame or a ``datasets.Dataset``."""
    if isinstance(rows, pd.DataFrame):
        out = rows.to_dict("records")
    else:
        out = [dict(r) for r in rows]
    if not out:
        raise ValueError(
            "rows is empty: rejection sampling needs at least one training prompt "
            "(a row with 'question' and 'answer'), e.g. "
            "grpo_lib.tasks.load_task_split('arithmetic', 'train')."
        )
    missing = {"question", "answer"} - set(out[0])
    if missing:
        raise ValueError(
            f"rows lack the column(s) {sorted(missing)}; the first row has "
            f"{sorted(out[0])}. Each row needs 'question' and 'answer'."
        )
    return out


def _check_k(k) -> None:
    """Raise unless ``k`` (samples per prompt) is an integer >= 1."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(
            f"k (samples per prompt) must be an integer >= 1, got {k!r}; the "
            f"command's --k defaults to {SAMPLES_PER_PROMPT}."
        )


def score_candidates(
    rows,
    k: int,
    completions: Sequence[str],
    lengths: Sequence[int] | None = None,
    finished: Sequence[bool] | None = None,
) -> pd.DataFrame:
    """The candidates table for ``k`` completions per row, in group-major order
    (``[row 0] * k + [row 1] * k + ...``, the sampler's layout).

    One row per completion: ``prompt_index, sample_index, question``, the columns of
    :func:`grpo_lib.evaluation.score_completions` (``answer, completion, correct,
    formatted, ..., truncated``) and the task's own (:func:`with_task_columns`)."""
    _check_k(k)
    rows = _as_rows(rows)
    if len(completions) != len(rows) * k:
        raise ValueError(
            f"got {len(completions)} completions for {len(rows)} prompts x k={k}; "
            f"pass exactly {len(rows) * k}, grouped by prompt."
        )
    scores = score_groups(rows, k, completions, lengths, finished)
    return with_task_columns(scores, rows)


def sample_candidates(
    model,
    tokenizer,
    rows,
    k: int,
    temperature: float = 1.0,
    max_new_tokens: int = 96,
    batch_size: int = 64,
    seed: int = 0,
    prompt_format: str = "chat",
    top_p: float = 1.0,
) -> pd.DataFrame:
    r"""Draw ``k`` completions per prompt, :math:`o_{i,1..k} \sim \pi_\theta(\cdot
    \mid q_i)`, and score each one (:func:`score_candidates`).

    ``rows``: the training prompts (list of dicts, DataFrame or ``datasets.Dataset``
    with ``question`` and ``answer``). Sampling uses
    :func:`grpo_lib.sampling.generate` at ``temperature`` / ``top_p``, seeded by
    ``seed`` (the same seed and ``batch_size`` give the same samples); prompts come from
    :func:`grpo_lib.evaluation.build_prompts` (``"chat"`` or ``"r1_zero"``).
    Returns one row per completion, ``len(rows) * k`` rows.
    """
    _check_k(k)
    rows = _as_rows(rows)
    prompts = build_prompts(rows, prompt_format)
    rollout = generate(model, tokenizer, prompts, num_generations=k,
                       max_new_tokens=max_new_tokens, temperature=temperature,
                       top_p=top_p, do_sample=True, batch_size=batch_size, seed=seed)
    return score_candidates(rows, k, rollout.texts,
                            lengths=rollout.completion_lengths.tolist(),
                            finished=rollout.finished.tolist())


# ======================================================================================
# Filtering
# ======================================================================================
def _check_candidates(candidates: pd.DataFrame) -> None:
    """Raise unless ``candidates`` is a non-empty table with the scored columns."""
    if not isinstance(candidates, pd.DataFrame):
        raise TypeError(
            f"candidates must be a pandas DataFrame from sample_candidates(), got "
            f"{type(candidates).__name__}."
        )
    missing = [c for c in _REQUIRED_COLUMNS if c not in candidates]
    if missing:
        raise ValueError(
            f"candidates lack the column(s) {missing}; make them with "
            "sample_candidates() or score_candidates()."
        )
    if len(candidates) == 0:
        raise ValueError("candidates is empty: there is nothing to filter.")


def _check_filters(filters: Sequence[str]) -> list[str]:
    """The filter names as a list; raise on a bare string or an unknown name."""
    if isinstance(filters, str):
        raise ValueError(
            f"filters must be a sequence of names, got the string {filters!r}; "
            f"wrap it: filters=({filters!r},)."
        )
    unknown = [f for f in filters if f not in FILTERS]
    if unknown:
        raise ValueError(
            f"unknown filter(s) {unknown}; choose from {list(FILTERS)} "
            f"(the default runs them all: {DEFAULT_FILTERS})."
        )
    return list(filters)


def cap_per_prompt(kept: pd.DataFrame, max_per_prompt: int) -> pd.DataFrame:
    """At most ``max_per_prompt`` samples per prompt: the **shortest** ones.

    Among samples that all passed the filters, R1 prefers concise, readable answers,
    and "keep the best" reads here as "keep the shortest correct one":
    length is in tokens (``length``), or characters where it is unknown; ties go to
    the earlier sample. The price: a short trace may skip a check a longer one made,
    so the cap is off by default. The result keeps the candidates' order.
    """
    if isinstance(max_per_prompt, bool) or not isinstance(max_per_prompt, int) \
            or max_per_prompt < 1:
        raise ValueError(
            f"max_per_prompt must be None (no cap) or an integer >= 1, got "
            f"{max_per_prompt!r}."
        )
    size = pd.to_numeric(kept["length"], errors="coerce")  # [n] tokens
    size = size.fillna(kept["completion"].astype(str).str.len())  # else characters
    ranked = pd.DataFrame({"prompt": kept["prompt_index"].to_numpy(),
                           "size": size.to_numpy(),
                           "sample": kept["sample_index"].to_numpy()})
    ranked = ranked.sort_values(["prompt", "size", "sample"], kind="stable")
    chosen = ranked.groupby("prompt", sort=False).head(max_per_prompt).index
    return kept.iloc[sorted(chosen)]  # positions, in the candidates' order


def _yield_row(kept: pd.DataFrame, previous: int, sampled: int) -> dict:
    """One stage of the yield table: what is left after it and what it removed."""
    return {
        "kept": len(kept),
        "dropped": previous - len(kept),
        "kept / sampled": len(kept) / sampled,
        "kept / previous": len(kept) / previous if previous else float("nan"),
        "prompts": int(kept["prompt_index"].nunique()),
    }


def apply_filters(
    candidates: pd.DataFrame,
    filters: Sequence[str] = DEFAULT_FILTERS,
    max_per_prompt: int | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Keep the candidates that pass every filter, in the order given.

    Each filter (:data:`FILTERS`) sees only the candidates the earlier ones kept, so
    ``deduplicate`` last removes duplicates among good samples only. With
    ``max_per_prompt`` the survivors are then capped per prompt
    (:func:`cap_per_prompt`, the shortest first).

    Returns ``(kept, yields)``: ``kept`` is the rows of ``candidates`` that survive
    (index and order kept); ``yields`` has one row per stage (``sampled``, each filter,
    ``capped``) with the columns :data:`YIELD_COLUMNS`: ``kept / sampled`` is the share
    of all samples still in, ``kept / previous`` the share this stage let through,
    ``prompts`` how many prompts still have at least one sample.
    """
    _check_candidates(candidates)
    names = _check_filters(filters)
    sampled = len(candidates)
    kept = candidates
    stages = {"sampled": _yield_row(kept, sampled, sampled)}
    for name in names:
        previous = len(kept)
        kept = kept[FILTERS[name](kept).to_numpy(dtype=bool)]
        stages[name] = _yield_row(kept, previous, sampled)
    if max_per_prompt is not None:
        previous = len(kept)
        kept = cap_per_prompt(kept, max_per_prompt)
        stages["capped"] = _yield_row(kept, previous, sampled)
    yields = pd.DataFrame.from_dict(stages, orient="index")[YIELD_COLUMNS]
    yields.index.name = "stage"
    return kept, yields


def random_control(candidates: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` candidates drawn uniformly at random, without replacement, from **all**
    candidates (no filter): the control data set.

    Fine-tune once on the kept samples and once on this control of the same size; the
    difference is what the filtering buys, beyond "more data from the RL model".
    The same ``seed`` gives the same draw; rows come back in the candidates' order.
    """
    _check_candidates(candidates)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= len(candidates):
        raise ValueError(
            f"n must be an integer between 0 and the number of candidates "
            f"({len(candidates)}), got {n!r}; pass len(kept) to match the filtered set."
        )
    rng = np.random.default_rng(seed)
    drawn = rng.choice(len(candidates), size=n, replace=False)  # [n] positions
    return candidates.iloc[np.sort(drawn)]


# ======================================================================================
# Countdown
# ======================================================================================
# Countdown rows (``numbers`` and ``target``, chapter 17) have no readable pattern and
# no gold string. A candidate is kept when its answer is right (``countdown_verdict``),
# its work shows it (every step right, the last one reaching the target: the rule of
# ``countdown_worked_answer_reward``), it ended and it is no duplicate; its SFT row's
# user turn is the task's own prompt.
COUNTDOWN_FILTERS = ("correct", "worked_out", "not_truncated", "deduplicate")
"""The filters for Countdown candidates, in order. The arithmetic ones for words and
equations do not apply (``worked_out`` checks every step), nor does ``non_repetitive``:
a Countdown search repeats its words by design."""


def _worked_out(candidates: pd.DataFrame) -> pd.Series:
    if "worked_out" not in candidates:
        raise ValueError("the candidates have no 'worked_out' column; it is scored for "
                         "Countdown rows (numbers and target) only.")
    return _is_true(candidates["worked_out"])


FILTERS["worked_out"] = _worked_out  # every step right, the last reaching the target


def with_task_columns(candidates: pd.DataFrame, rows: list[dict]) -> pd.DataFrame:
    """For Countdown rows, add ``worked_out``, ``numbers`` and ``target`` to the
    candidates of ``rows`` (group-major, ``k`` per row); other rows: unchanged."""
    rows = _as_rows(rows)  # a clear error for no rows or rows without a question
    if len(candidates) % len(rows):
        raise ValueError(f"{len(candidates)} candidates for {len(rows)} rows: pass k "
                         f"candidates per row, grouped by row (score_candidates does).")
    if not ("numbers" in rows[0] and "target" in rows[0]):
        return candidates
    from .rewards import countdown_worked_answer_reward

    k = len(candidates) // len(rows)
    numbers = [list(r["numbers"]) for r in rows for _ in range(k)]  # [N * k]
    target = [r["target"] for r in rows for _ in range(k)]
    worked = countdown_worked_answer_reward(candidates["completion"].tolist(),
                                            numbers=numbers, target=target)
    out = candidates.copy()
    out["worked_out"] = [w == 1.0 for w in worked]
    out["numbers"], out["target"] = numbers, target
    return out


def default_filters(candidates: pd.DataFrame) -> tuple[str, ...]:
    """:data:`COUNTDOWN_FILTERS` for Countdown candidates (a ``worked_out`` column),
    :data:`DEFAULT_FILTERS` otherwise."""
    return COUNTDOWN_FILTERS if "worked_out" in candidates else DEFAULT_FILTERS


# ======================================================================================
# SFT data
# ======================================================================================
def to_sft_rows(kept: pd.DataFrame, source: str = "rejection_sampling") -> list[dict]:
    """One conversation per kept sample, in TRL's conversational format:
    ``{"messages": [user, assistant], "question", "answer", "source"}``, the user
    turn being :func:`grpo_lib.tasks.arithmetic.question_text` (the same layout as the
    cold-start data, :func:`grpo_lib.tasks.cold_start.cold_start_rows`), or for
    Countdown candidates (``numbers`` and ``target`` columns) the task's prompt,
    :func:`grpo_lib.tasks.countdown.countdown_prompt`."""
    from .tasks.arithmetic import question_text
    from .tasks.countdown import countdown_prompt

    missing = [c for c in ("question", "answer", "completion") if c not in kept]
    if missing:
        raise ValueError(
            f"kept lacks the column(s) {missing}; pass the first value returned by "
            "apply_filters()."
        )
    if "numbers" in kept and "target" in kept:  # Countdown: the task's own prompt
        users = [countdown_prompt(n, t)[0]["content"]
                 for n, t in zip(kept["numbers"], kept["target"])]
    else:
        users = [question_text(q) for q in kept["question"]]
    return [
        {"messages": [{"role": "user", "content": u},
                      {"role": "assistant", "content": str(c)}],
         "question": q, "answer": str(a), "source": source}
        for u, q, a, c in zip(users, kept["question"], kept["answer"],
                              kept["completion"])
    ]


# ======================================================================================
# Command line (``python -m grpo_lib rejection-sample``)
# ======================================================================================
def rejection_sample_from_args(args: argparse.Namespace) -> pd.DataFrame:
    """Sample, filter and write SFT data as the ``rejection-sample`` subcommand asks.

    Writes ``args.out`` (the kept conversations) and, when given, ``args.control_out``
    (the random control of the same size) and ``args.candidates_csv`` (every
    candidate with its scores). Prints and returns the yield table.
    """
    from .models import load_model_and_tokenizer
    from .profiles import profile
    from .tasks import write_jsonl
    from .tasks import load_task_split

    P = profile()
    model, tokenizer = load_model_and_tokenizer(args.model, device=P.device)
    dataset = load_task_split(args.task, args.split)
    rows = _as_rows(dataset.select(range(min(args.n, len(dataset)))))
    start = time.perf_counter()
    candidates = sample_candidates(
        model, tokenizer, rows, args.k, temperature=args.temperature,
        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
        seed=args.seed, prompt_format=args.prompt_format)
    seconds = time.perf_counter() - start
    kept, yields = apply_filters(candidates, default_filters(candidates),
                                 max_per_prompt=args.max_per_prompt)
    print(f"model: {args.model} | {args.task}/{args.split} | {len(rows)} prompts x "
          f"k={args.k} | {P} | sampling and scoring took {seconds:.0f} s")
    print(yields.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"wrote {write_jsonl(to_sft_rows(kept), args.out)} ({len(kept)} samples)")
    if args.control_out:
        control = random_control(candidates, len(kept), seed=args.seed)
        path = write_jsonl(to_sft_rows(control, source="random_control"),
                           args.control_out)
        print(f"wrote {path} ({len(control)} samples, unfiltered control)")
    if args.candidates_csv:
        candidates.to_csv(args.candidates_csv, index=False)
        print(f"wrote {args.candidates_csv}")
    if args.yields_csv:
        yields.to_csv(args.yields_csv)
        print(f"wrote {args.yields_csv}")
    return yields


def add_rejection_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``rejection-sample`` subcommand to the CLI's ``subparsers``."""
    from .cli import at_least  # counts below 1 are argparse errors

    p = subparsers.add_parser(
        "rejection-sample",
        help="sample K answers per training prompt, keep the correct readable ones")
    p.add_argument("--model", required=True, help="checkpoint folder or hub name")
    p.add_argument("--task", default="arithmetic", choices=["arithmetic", "countdown"],
                   help="the filters and the SFT rows' user turn follow the task "
                        "(DEFAULT_FILTERS or COUNTDOWN_FILTERS)")
    p.add_argument("--split", default="train")
    p.add_argument("--n", type=at_least(1), default=500, help="the first N prompts")
    p.add_argument("--k", type=at_least(1), default=SAMPLES_PER_PROMPT,
                   help="samples per prompt")
    p.add_argument("--temperature", type=at_least(0.0, float), default=1.0)
    p.add_argument("--max-new-tokens", type=at_least(1), default=96)
    p.add_argument("--batch-size", type=at_least(1), default=64)
    p.add_argument("--prompt-format", default="chat", choices=["chat", "r1_zero"])
    p.add_argument("--max-per-prompt", type=at_least(1), default=None,
                   help="keep at most this many (the shortest) per prompt")
    p.add_argument("--seed", type=at_least(0), default=0)
    p.add_argument("--out", default="data/sft/rejection_sampled.jsonl")
    p.add_argument("--control-out", default=None,
                   help="also write a random unfiltered control of the same size")
    p.add_argument("--candidates-csv", default=None,
                   help="also write every candidate with its scores (.csv.gz: "
                        "compressed)")
    p.add_argument("--yields-csv", default=None,
                   help="also write the yield table")
    p.set_defaults(func=rejection_sample_from_args)
    return p
