"""The evaluation harness: the single judge of every before/after number in the book.

:func:`evaluate` decodes the first ``n`` problems of a data set with the book's sampler
(:func:`grpo_lib.sampling.generate`), once greedily and optionally ``k`` times by
sampling, and scores every completion with :mod:`grpo_lib.parsing`:

========================  ==============================================================
column                    meaning (share of completions unless said otherwise)
========================  ==============================================================
``strict_acc``            the answer inside the last ``<answer>...</answer>`` is correct
``lenient_acc``           the last number anywhere in the text is correct
``format_rate``           ``<think>...</think> <answer>...</answer>`` is well formed
``lang_mix_rate``         the text contains Chinese (CJK) characters
``self_correction_rate``  the text revises itself ("wait, ... recheck")
``repetition_rate``       more than :data:`REPETITION_THRESHOLD` of its n-grams repeat
``mean_length``           mean completion length in tokens (stop token included)
``truncated_rate``        the completion hit ``max_new_tokens`` without a stop token
``k``, ``pass_at_k``      samples per problem; problems with >= 1 strict-correct sample
``n``                     number of problems
========================  ==============================================================

The sampled row averages over all ``n * k`` samples, so its ``strict_acc`` is an
unbiased estimate of pass@1 at that temperature; ``pass_at_k`` is the share of problems
solved by at least one of the ``k`` samples (the unbiased estimator of Chen et al.,
2021, eq. 1, reduces to this when exactly ``k`` samples are drawn).
"""
from __future__ import annotations

from typing import Any, Sequence

import math
from collections import Counter

import pandas as pd

from . import parsing
from .sampling import generate

__all__ = [
    "REPETITION_THRESHOLD",
    "METRIC_COLUMNS",
    "evaluate",
    "score_completions",
    "score_groups",
    "summarize_scores",
    "build_prompts",
    "answer_entropy",
    "group_diversity",
]

REPETITION_THRESHOLD = 0.2
"""A completion counts as repetitive when more than this share of its word trigrams
(:func:`grpo_lib.parsing.repeated_ngram_fraction`, ``n=3``) repeat an earlier one.
On the pretraining corpus (:mod:`grpo_lib.corpus`) clean step-by-step traces stay
below 0.2 (all but a few below 0.14), one step repeated 2-4 times above 0.23, so 0.2
separates the two; a model looping until ``max_new_tokens`` scores far above it."""

METRIC_COLUMNS = [
    "strict_acc", "lenient_acc", "format_rate", "lang_mix_rate", "self_correction_rate",
    "repetition_rate", "mean_length", "truncated_rate", "k", "pass_at_k", "n",
]
PROMPT_FORMATS = ("chat", "r1_zero")


def score_completions(
    completions: Sequence[str],
    answers: Sequence[Any],
    lengths: Sequence[int] | None = None,
    finished: Sequence[bool] | None = None,
) -> pd.DataFrame:
    """Score each completion against its gold answer; one row per completion.

    Columns: ``completion, answer, strict_pred, lenient_pred, correct`` (strict),
    ``lenient_correct, formatted, lang_mixed, self_correction, repeated_fraction,
    repetitive, length, truncated``. ``lengths`` (tokens) and ``finished`` come from the
    sampler; without them ``length`` and ``truncated`` are missing values.
    Never raises on malformed text: an unparsable answer is simply not correct.
    """
    if len(completions) != len(answers):
        raise ValueError(
            f"score_completions got {len(completions)} completions but {len(answers)} "
            "answers; pass one gold answer per completion (repeat it k times for k "
            "samples)."
        )
    for name, extra in (("lengths", lengths), ("finished", finished)):
        if extra is not None and len(extra) != len(completions):
            raise ValueError(
                f"{name} has {len(extra)} entries for {len(completions)} completions."
            )
    rows = []
    for i, (text, gold) in enumerate(zip(completions, answers)):
        gold = str(gold)
        strict = parsing.extract_answer(text, strict=True)
        lenient = parsing.extract_answer(text, strict=False)
        repeated = float(parsing.repeated_ngram_fraction(text, n=3))
        rows.append({
            "completion": text,
            "answer": gold,
            "strict_pred": strict,
            "lenient_pred": lenient,
            "correct": strict is not None and bool(parsing.answers_equal(strict, gold)),
            "lenient_correct": lenient is not None
            and bool(parsing.answers_equal(lenient, gold)),
            "formatted": bool(parsing.is_well_formatted(text, strict=True)),
            "lang_mixed": bool(parsing.has_cjk(text)),
            "self_correction": bool(parsing.has_self_correction(text)),
            "repeated_fraction": repeated,
            "repetitive": repeated > REPETITION_THRESHOLD,
            "length": int(lengths[i]) if lengths is not None else pd.NA,
            "truncated": (not bool(finished[i])) if finished is not None else pd.NA,
        })
    return pd.DataFrame(rows)


def summarize_scores(scores: pd.DataFrame, k: int = 1) -> dict[str, float]:
    r"""One table row from per-completion scores (:func:`score_completions`).

    Rates are means over all completions, e.g.
    :math:`\text{strict\_acc} = \frac{1}{nk}\sum_{i=1}^{n}\sum_{j=1}^{k}
    \mathbb{1}[\hat a_{ij} = a_i]`, and
    :math:`\text{pass@}k = \frac{1}{n}\sum_i \max_j \mathbb{1}[\hat a_{ij} = a_i]`.
    ``scores`` must hold the ``k`` completions of each problem in consecutive rows
    (the sampler's group-major order), or carry a ``prompt_index`` column.
    """
    if len(scores) == 0:
        raise ValueError("summarize_scores got no completions to summarise.")
    if len(scores) % k != 0:
        raise ValueError(
            f"{len(scores)} completions cannot be split into groups of k={k}."
        )
    problem = (scores["prompt_index"] if "prompt_index" in scores
               else pd.Series(range(len(scores))) // k)
    solved = scores["correct"].groupby(problem.values).any()
    lengths = pd.to_numeric(scores["length"], errors="coerce")
    truncated = pd.to_numeric(scores["truncated"], errors="coerce")
    return {
        "strict_acc": float(scores["correct"].mean()),
        "lenient_acc": float(scores["lenient_correct"].mean()),
        "format_rate": float(scores["formatted"].mean()),
        "lang_mix_rate": float(scores["lang_mixed"].mean()),
        "self_correction_rate": float(scores["self_correction"].mean()),
        "repetition_rate": float(scores["repetitive"].mean()),
        "mean_length": float(lengths.mean()),
        "truncated_rate": float(truncated.mean()),
        "k": int(k),
        "pass_at_k": float(solved.mean()),
        "n": int(len(solved)),
    }


def answer_entropy(answers: Sequence[Any]) -> float:
    r"""Shannon entropy, in bits, of the answers within one group.

    .. math:: H = -\sum_a \hat q_a \log_2 \hat q_a, \qquad
       \hat q_a = \frac{\#\{i : \hat a_i = a\}}{G}

    ``None`` (no parsable answer) counts as one more answer value. ``0`` when all ``G``
    answers agree; ``log2(G)`` when all differ. ``["14", "14", "20", None]`` gives
    :math:`-(\tfrac12\log_2\tfrac12 + 2\cdot\tfrac14\log_2\tfrac14) = 1.5` bits.
    """
    if len(answers) == 0:
        raise ValueError("answer_entropy needs at least one answer.")
    counts = Counter("<none>" if a is None else str(a) for a in answers)
    total = len(answers)
    return float(sum(c / total * math.log2(total / c) for c in counts.values()))


def group_diversity(
    completions: Sequence[str],
    group_size: int,
    rewards: Sequence[float] | None = None,
) -> pd.DataFrame:
    """Diversity of each group of ``group_size`` consecutive completions (one row each).

    Columns: ``distinct`` (number of different texts), ``answer_entropy`` (bits, over
    the strict answers, :func:`answer_entropy`) and, with ``rewards``, ``reward_mean``,
    ``reward_std`` (sample std, as in :func:`grpo_lib.advantages.group_advantages`) and
    ``zero_std`` (all rewards equal: every advantage is 0 and the group teaches
    nothing).
    """
    if group_size < 1 or len(completions) % group_size != 0:
        raise ValueError(
            f"{len(completions)} completions cannot be split into groups of "
            f"group_size={group_size}; pass the sampler's num_generations."
        )
    if rewards is not None and len(rewards) != len(completions):
        raise ValueError(
            f"got {len(rewards)} rewards for {len(completions)} completions."
        )
    rows = []
    for start in range(0, len(completions), group_size):
        texts = list(completions[start:start + group_size])
        row = {
            "distinct": len(set(texts)),
            "answer_entropy": answer_entropy(
                [parsing.extract_answer(t, strict=True) for t in texts]),
        }
        if rewards is not None:
            r = pd.Series(rewards[start:start + group_size], dtype=float)
            row["reward_mean"] = float(r.mean())
            row["reward_std"] = float(r.std(ddof=1)) if group_size > 1 else 0.0
            row["zero_std"] = bool(r.max() == r.min())
        rows.append(row)
    return pd.DataFrame(rows)


def _rows(dataset, n: int) -> list[dict]:
    """The first ``n`` rows of a datasets.Dataset, a DataFrame or a list of dicts."""
    if isinstance(dataset, pd.DataFrame):
        rows = dataset.head(n).to_dict("records")
    elif hasattr(dataset, "select") and hasattr(dataset, "column_names"):
        rows = list(dataset.select(range(min(n, len(dataset)))))
    else:
        rows = list(dataset)[:n]
    if not rows:
        raise ValueError("The dataset is empty: evaluate() needs at least one problem.")
    missing = {"question", "answer"} - set(rows[0])
    if missing:
        raise ValueError(
            f"The dataset lacks the column(s) {sorted(missing)}; it has "
            f"{sorted(rows[0])}. Load it with grpo_lib.tasks.load_task_split(...)."
        )
    return rows


def build_prompts(rows: Sequence[dict], prompt_format: str = "chat") -> list:
    """The model inputs for each problem.

    ``"chat"``: the row's ``prompt`` messages (or ``chat_prompt(question)`` when the
    column is absent), rendered by the tokenizer's chat template inside the sampler.
    ``"r1_zero"``: the raw R1-Zero template text around ``What is <question>?``.
    """
    from .tasks.arithmetic import chat_prompt, r1_zero_prompt

    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(
            f"prompt_format must be one of {PROMPT_FORMATS}, got {prompt_format!r}."
        )
    if prompt_format == "r1_zero":
        return [r1_zero_prompt(r["question"]) for r in rows]
    return [r["prompt"] if r.get("prompt") else chat_prompt(r["question"])
            for r in rows]


def completion_correct(text: str, row: dict, strict: bool = True) -> bool:
    """Is ``text`` a right answer to ``row``'s problem?

    Countdown rows (``numbers`` and ``target``): the answer uses each number once
    and reaches the target (:func:`grpo_lib.rewards.countdown_verdict`; it has no
    lenient reading). Other rows: the extracted answer equals ``row["answer"]``.
    """
    if "numbers" in row and "target" in row:
        from .rewards import countdown_verdict

        return countdown_verdict(text, row["numbers"], row["target"]) == "correct"
    gold = row.get("answer")
    return gold is not None and bool(
        parsing.answers_equal(parsing.extract_answer(text, strict=strict), gold))


def score_groups(rows: Sequence[dict], k: int, completions: Sequence[str],
                 lengths=None, finished=None) -> pd.DataFrame:
    """:func:`score_completions` for ``k`` completions per row in group-major order
    (the sampler's layout), with ``prompt_index, sample_index, question`` in front.
    Correctness is :func:`completion_correct` (Countdown rows are checked by rule)."""
    answers = [r["answer"] for r in rows for _ in range(k)]  # [N * k]
    scores = score_completions(list(completions), answers, lengths=lengths,
                               finished=finished)
    if "numbers" in rows[0]:  # Countdown: no gold string, a rule
        repeated = [r for r in rows for _ in range(k)]
        scores["correct"] = [completion_correct(t, r)
                             for t, r in zip(completions, repeated)]
        scores["lenient_correct"] = scores["correct"]
    scores.insert(0, "prompt_index", [i for i in range(len(rows)) for _ in range(k)])
    scores.insert(1, "sample_index", [j for _ in rows for j in range(k)])
    scores.insert(2, "question", [r["question"] for r in rows for _ in range(k)])
    return scores


def _run_mode(model, tokenizer, prompts, rows, mode, k, **gen_kwargs) -> pd.DataFrame:
    rollout = generate(model, tokenizer, prompts, num_generations=k, **gen_kwargs)
    scores = score_groups(rows, k, rollout.texts,
                          lengths=rollout.completion_lengths.tolist(),
                          finished=rollout.finished.tolist())
    scores.insert(0, "mode", mode)
    return scores


def evaluate(
    model,
    tokenizer,
    dataset,
    n: int = 500,
    batch_size: int = 64,
    max_new_tokens: int = 96,
    num_samples: int = 0,
    temperature: float = 1.0,
    prompt_format: str = "chat",
    seed: int = 0,
    return_samples: bool = False,
):
    """Evaluate a model on the first ``n`` problems of ``dataset``.

    Always decodes greedily (row ``"greedy"``); with ``num_samples = k > 0`` also draws
    ``k`` samples per problem at ``temperature`` (row ``"sampled"``, seeded by
    ``seed``).
    ``batch_size`` is the number of sequences decoded together.

    Returns a DataFrame indexed by ``mode`` with the columns of :data:`METRIC_COLUMNS`
    (see the module docstring); with ``return_samples=True`` returns
    ``(table, samples)`` where ``samples`` has one row per completion (``mode,
    prompt_index, sample_index, question, answer, completion, strict_pred, correct,
    formatted, lang_mixed, self_correction, repetitive, length, truncated, ...``).
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n (number of problems) must be an integer >= 1, got {n!r}.")
    if not isinstance(num_samples, int) or num_samples < 0:
        raise ValueError(
            f"num_samples must be an integer >= 0 (0 = greedy only), got "
            f"{num_samples!r}."
        )
    rows = _rows(dataset, n)
    prompts = build_prompts(rows, prompt_format)
    common = dict(max_new_tokens=max_new_tokens, batch_size=batch_size)
    samples = [_run_mode(model, tokenizer, prompts, rows, "greedy", 1,
                         do_sample=False, **common)]
    if num_samples > 0:
        samples.append(_run_mode(model, tokenizer, prompts, rows, "sampled",
                                 num_samples, do_sample=True, temperature=temperature,
                                 seed=seed, **common))
    table = pd.DataFrame(
        [summarize_scores(s, k=int(s["sample_index"].max()) + 1) for s in samples],
        index=pd.Index([s["mode"].iloc[0] for s in samples], name="mode"),
    )[METRIC_COLUMNS]
    if return_samples:
        return table, pd.concat(samples, ignore_index=True)
    return table
