"""Cold-start data: readable reasoning traces for supervised fine-tuning (R1, stage 1).

DeepSeek-R1 starts its reasoning RL not from the base model but from a checkpoint
fine-tuned on "thousands of long-CoT examples", collected by few-shot prompting, by
asking for detailed answers with reflection and verification, and by gathering readable
R1-Zero outputs refined by human annotators (DeepSeek-R1 paper, section 2.3.1). Our
task is small enough to write such traces by program: :func:`annotate` is the
*programmatic annotator*. Its trace says why the order of operations matters, shows
every step, stays in English and ends with a short check:

    <think> * comes before + and -. First 3 * 4 = 12, now 2 + 12. Then 2 + 12 = 14.
    Check: 14 - 12 = 2. </think> <answer> 14 </answer>

:func:`cold_start_rows` turns problems into conversations in TRL's conversational
format (a ``messages`` column), ready for :class:`grpo_lib.sft.SFTTrainer`.

The second source is the paper's other one: R1-Zero's own outputs, kept when they are
correct, well formatted and in one language, then lightly normalised
(:func:`normalize_trace`, :func:`r1_zero_rows`, :func:`write_r1_zero_cold_start`):

    python -m grpo_lib.tasks.cold_start r1-zero --model data/models/tiny-qwen2-r1-zero
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

from . import write_jsonl
from .arithmetic import (DATA_DIR, Problem, question_text, read_rows, solve_steps,
                         tokenize_expression)
from ..parsing import (ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN,
                       is_well_formatted)

COLD_START_DIR = DATA_DIR.parent / "cold_start"

# the first sentence of a trace: why the steps come in the order they do. Written with
# the operator symbols, which the tiny model's 512-token vocabulary encodes in one token
# each (it spells a word like "multiplication" letter by letter)
RULES = {
    "parens_and_mul": "( ) come first, then * before + and -.",
    "parens": "( ) come first.",
    "mul": "* comes before + and -.",
    "left_to_right": "+ and - go from left to right.",
    "single": "One step.",
}


def order_rule(question: str) -> str:
    """The rule that fixes the order of the steps of ``question`` (a key of RULES)."""
    tokens = tokenize_expression(question)
    ops = [t for t in tokens if t in ("+", "-", "*")]
    has_parens, mixes_mul = "(" in tokens, "*" in ops and ({"+", "-"} & set(ops))
    if len(ops) == 1:
        return "single"
    if has_parens:
        return "parens_and_mul" if mixes_mul else "parens"
    return "mul" if mixes_mul else "left_to_right"


def inverse_check(a: int, op: str, b: int, value: int) -> str:
    """A one-line check of the last step by its inverse: ``14 - 12 = 2`` for
    ``2 + 12 = 14``; a product (the tasks have no division) by a division by ``b``,
    or by ``a * 0 = 0`` when ``b`` is 0."""
    if op == "+":
        return f"{value} - {b} = {a}"
    if op == "-":
        return f"{value} + {b} = {a}"
    if b != 0:
        return f"{value} / {b} = {a}"
    return f"{a} * 0 = 0"


def annotate(question: str) -> str:
    """The readable trace of ``question`` in the R1 format (see the module docstring).

    Every step is ``a op b = value`` followed by what remains; the answer is the
    value of the last step and the check is its inverse (:func:`inverse_check`).
    """
    steps = solve_steps(question, precedence=True)
    if not steps:
        raise ValueError(f"annotate needs an expression with at least one operation, "
                         f"got {question!r}")
    parts = [RULES[order_rule(question)]]
    for i, (a, op, b, value, rest) in enumerate(steps):
        lead = "First" if i == 0 and len(steps) > 1 else "Then" if i else "So"
        last = i == len(steps) - 1
        parts.append(f"{lead} {a} {op} {b} = {value}" + ("." if last else
                                                        f", now {rest}."))
    a, op, b, value, _ = steps[-1]
    parts.append(f"Check: {inverse_check(a, op, b, value)}.")
    return f"<think> {' '.join(parts)} </think> <answer> {value} </answer>"


def cold_start_rows(problems: list[Problem], source: str = "annotator") -> list[dict]:
    """One conversation per problem, ``{"messages": [user, assistant], "question",
    "answer", "source"}``: TRL's conversational format plus the columns the
    evaluation harness and the rewards read."""
    rows = []
    for p in problems:
        rows.append({
            "messages": [{"role": "user", "content": question_text(p.question)},
                         {"role": "assistant", "content": annotate(p.question)}],
            "question": p.question, "answer": str(p.answer), "source": source,
        })
    return rows


def pick_cold_start_rows(rows: list[dict], n: int, seed: int = 0) -> list[dict]:
    """``n`` rows: every one-step (two-operand) problem, the rest drawn at random.

    One-step problems are under 1% of the train split (the splits were drawn so that no
    question is in both, and there are few distinct ones), so a plain random draw
    would give a few dozen, too few for the model to learn their shorter trace."""
    if not 1 <= n <= len(rows):
        raise ValueError(f"n must be in 1..{len(rows)} (the train split), got {n}")
    rng = random.Random(seed)
    one_step = [r for r in rows if r["num_operands"] == 2][:n]
    others = [r for r in rows if r["num_operands"] != 2]
    picked = one_step + rng.sample(others, n - len(one_step))
    rng.shuffle(picked)
    return picked


def write_cold_start(out_dir: str | Path = COLD_START_DIR, n: int = 4000,
                     seed: int = 0) -> Path:
    """Annotate ``n`` problems of the arithmetic *train* split
    (:func:`pick_cold_start_rows`) and write them to ``out_dir/annotator.jsonl``; the
    test split is never used."""
    picked = pick_cold_start_rows(read_rows("train"), n, seed)
    problems = [Problem.from_row(r) for r in picked]
    path = write_jsonl(cold_start_rows(problems), Path(out_dir) / "annotator.jsonl")
    print(f"wrote {n} annotated conversations to {path}")
    return path


# ======================================================================================
# Source (b): R1-Zero's own outputs, filtered and normalised
# ======================================================================================
R1_ZERO_FILTERS = ("correct", "formatted", "single_language", "non_repetitive",
                   "not_truncated", "deduplicate")
"""The filters of :func:`grpo_lib.rejection.apply_filters` a kept R1-Zero trace passes,
in this order; then one trace per question (:func:`first_per_prompt`)."""


def normalize_trace(text: str) -> str:
    """The R1-format trace with its whitespace tidied, nothing else changed:

    ``<think> T </think> <answer> A </answer>`` where ``T`` and ``A`` are the think and
    answer blocks with every run of whitespace (spaces, tabs, newlines) turned into one
    space and the ends stripped; one space inside each tag, one between the blocks,
    nothing before or after. No word, digit or symbol is added, removed or reordered:
    ``" <think>3 * 4 = 12,\n 2 + 12 = 14</think>\n<answer>14</answer>"`` becomes
    ``"<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>"``.

    Raises ``ValueError`` for text that is not exactly one think block and one answer
    block (:func:`grpo_lib.parsing.is_well_formatted`, strict): filter by format first.
    """
    if not isinstance(text, str) or not is_well_formatted(text, strict=True):
        raise ValueError(f"normalize_trace needs a well-formatted trace "
                         f"(<think> ... </think> <answer> ... </answer>), got "
                         f"{text!r:.120}; filter by format first.")
    body = text.strip()
    think_end, answer_start = body.find(THINK_CLOSE), body.find(ANSWER_OPEN)
    think = " ".join(body[len(THINK_OPEN):think_end].split())
    answer = " ".join(body[answer_start + len(ANSWER_OPEN):-len(ANSWER_CLOSE)].split())
    return f"{THINK_OPEN} {think} {THINK_CLOSE} {ANSWER_OPEN} {answer} {ANSWER_CLOSE}"


def first_per_prompt(kept):
    """The first kept sample of each prompt (lowest ``sample_index``): one trace per
    question, drawn as the sampler drew it (no preference for short or long ones)."""
    order = kept.sort_values(["prompt_index", "sample_index"], kind="stable")
    chosen = order.groupby("prompt_index", sort=False).head(1).index
    return kept.loc[kept.index.isin(chosen)]


def r1_zero_rows(candidates, filters=R1_ZERO_FILTERS, source="r1_zero"):
    """Cold-start conversations from scored R1-Zero samples, and the yield table.

    ``candidates``: the table of :func:`grpo_lib.rejection.sample_candidates` (one row
    per sample). The samples pass ``filters`` in order
    (:func:`grpo_lib.rejection.apply_filters`), then :func:`first_per_prompt` keeps one
    per question, and each kept trace is tidied by :func:`normalize_trace`.

    Returns ``(rows, yields)``: ``rows`` in the layout of :func:`cold_start_rows`
    (``source`` as given, plus ``normalized``: whether the tidy changed the text);
    ``yields`` is apply_filters' table with a last stage ``one_per_question``.
    """
    import pandas as pd

    from ..rejection import apply_filters, to_sft_rows

    kept, yields = apply_filters(candidates, filters)
    sampled, previous = len(candidates), len(kept)
    kept = first_per_prompt(kept)
    yields.loc["one_per_question"] = {
        "kept": len(kept), "dropped": previous - len(kept),
        "kept / sampled": len(kept) / sampled,
        "kept / previous": len(kept) / previous if previous else float("nan"),
        "prompts": int(kept["prompt_index"].nunique())}
    tidy = kept["completion"].map(normalize_trace)
    rows = to_sft_rows(kept.assign(completion=tidy), source=source)
    for row, before, after in zip(rows, kept["completion"], tidy):
        row["normalized"] = before != after
    yields[["kept", "dropped", "prompts"]] = yields[
        ["kept", "dropped", "prompts"]].astype(int)
    return rows, pd.DataFrame(yields)


def write_r1_zero_cold_start(model_dir: str | Path, out: str | Path,
                             questions: str | Path = COLD_START_DIR / "annotator.jsonl",
                             k: int = 4, temperature: float = 1.0,
                             max_new_tokens: int = 96, seed: int = 0,
                             batch_size: int = 256, source: str = "r1_zero") -> Path:
    """Source (b): sample ``k`` answers of the R1-Zero model ``model_dir`` to each
    question of ``questions`` (by default the annotator's 4,000 training questions,
    so both sources teach the same problems), keep and tidy them (:func:`r1_zero_rows`)
    and write ``out`` (JSONL) and ``out`` with ``_yield.csv`` (the yield table).

    Any model's answers pass the same filters: chapter 11 filters the base model's
    own (``source="base_self"``), a cold start that changes the model least."""
    from ..models import load_model_and_tokenizer
    from ..rejection import sample_candidates
    from ..sft import read_jsonl

    asked = [{"question": r["question"], "answer": r["answer"]}
             for r in read_jsonl(questions, "questions")]
    model, tokenizer = load_model_and_tokenizer(model_dir, device="cpu")
    candidates = sample_candidates(model, tokenizer, asked, k, temperature=temperature,
                                   max_new_tokens=max_new_tokens, batch_size=batch_size,
                                   seed=seed, prompt_format="chat")
    rows, yields = r1_zero_rows(candidates, source=source)
    out = Path(out)
    write_jsonl(rows, out)
    yields.to_csv(out.with_name(out.stem + "_yield.csv"))
    print(yields.to_string(float_format=lambda v: f"{v:.3f}"))
    changed = sum(r["normalized"] for r in rows)
    print(f"wrote {len(rows)} conversations to {out} ({changed} changed by "
          f"normalize_trace); {len(asked)} questions x k={k}")
    return out


def main(argv=None) -> None:
    """``python -m grpo_lib.tasks.cold_start r1-zero --model DIR [...]``."""
    parser = argparse.ArgumentParser(prog="python -m grpo_lib.tasks.cold_start")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("r1-zero", help="source (b): filtered R1-Zero traces")
    p.add_argument("--model", required=True,
                   help="the R1-Zero model folder (or any model whose answers to keep)")
    p.add_argument("--source", default="r1_zero",
                   help="the label written into each row's 'source' field")
    p.add_argument("--out", default=str(COLD_START_DIR / "r1_zero.jsonl"))
    p.add_argument("--questions", default=str(COLD_START_DIR / "annotator.jsonl"))
    p.add_argument("--k", type=int, default=4, help="samples per question")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write_r1_zero_cold_start(args.model, args.out, args.questions, k=args.k,
                             temperature=args.temperature,
                             max_new_tokens=args.max_new_tokens, seed=args.seed,
                             source=args.source)


if __name__ == "__main__":
    main()
