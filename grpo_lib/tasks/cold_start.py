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
"""
from __future__ import annotations

import random
from pathlib import Path

from . import write_jsonl
from .arithmetic import (DATA_DIR, Problem, question_text, read_rows, solve_steps,
                         tokenize_expression)

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
    ``2 + 12 = 14``; a product is checked by adding ``b`` copies of ``a``, or by
    division when that is exact."""
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
