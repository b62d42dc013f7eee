"""The book's task: integer arithmetic with ``+``, ``-``, ``*`` and parentheses.

A problem is a short expression such as ``2 + 3 * 4`` with an exact integer answer. The
difficulty knobs are the number of operands, the largest operand, the chance of a pair
of parentheses and a bound on every intermediate value (so a tiny model can learn the
arithmetic facts involved). Problems where evaluating strictly left to right gives a
different answer (``precedence_matters``) are the ones where the base model's designed
mistake (``2 + 3 * 4 -> 20``) shows.

Two prompt styles, as in the R1 paper's setting and in chat models:

* :func:`r1_zero_prompt` — the raw R1-Zero template (DeepSeek-R1 paper, Table 1);
* :func:`chat_prompt` — one user message, rendered with the tokenizer's chat template.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from . import read_jsonl

OPS = ("+", "-", "*")
DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "arithmetic"

R1_ZERO_TEMPLATE = (
    "A conversation between User and Assistant. The user asks a question, and the "
    "Assistant solves it. The assistant first thinks about the reasoning process in "
    "the mind and then provides the user with the answer. The reasoning process and "
    "answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., "
    "<think> reasoning process here </think> <answer> answer here </answer>. "
    "User: {prompt}. Assistant:"
)


def question_text(question: str) -> str:
    """The user's words for an expression: ``"What is 2 + 3 * 4?"``."""
    return f"What is {question}?"


# Three Chinese ways to ask the same question (chapter 11's prompts in two languages).
CHINESE_WORDINGS = ("{q} 等于多少？", "计算 {q}。", "请计算 {q} 的值。")


def chinese_prompt(question: str, k: int = 0) -> list[dict]:
    """The question in Chinese, in wording ``k`` (cycling through
    :data:`CHINESE_WORDINGS`)."""
    wording = CHINESE_WORDINGS[k % len(CHINESE_WORDINGS)]
    return [{"role": "user", "content": wording.format(q=question)}]


def bilingual_prompt(question: str, index: int) -> list[dict]:
    """Row ``index``'s prompt in the two-language set: even rows in English, odd rows
    in Chinese (wording ``index // 2``)."""
    return chat_prompt(question) if index % 2 == 0 else chinese_prompt(question,
                                                                       index // 2)


def r1_zero_prompt(question: str) -> str:
    """The R1-Zero prompt (DeepSeek-R1, Table 1) around ``What is <question>?``."""
    return R1_ZERO_TEMPLATE.format(prompt=question_text(question))


def chat_prompt(question: str) -> list[dict]:
    """A one-message conversation, for ``tokenizer.apply_chat_template``."""
    return [{"role": "user", "content": question_text(question)}]


# ----------------------------------------------------------------------- expressions
# A token list is what we reduce step by step: ints and the strings
# "+", "-", "*", "(", ")".

def tokenize_expression(text: str) -> list:
    """``"2 + (3 * 4)"`` -> ``[2, "+", "(", 3, "*", 4, ")"]``; raises ValueError on
    junk."""
    out: list = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdecimal():  # not isdigit: '²' is a digit, not a decimal one
            j = i
            while j < len(text) and text[j].isdecimal():
                j += 1
            out.append(int(text[i:j]))
            i = j
        elif ch in "+-*()":
            out.append(ch)
            i += 1
        else:
            raise ValueError(
                f"unexpected character {ch!r} at {i} in expression {text!r}")
    return out


def format_tokens(tokens: list) -> str:
    """Inverse of :func:`tokenize_expression`: ``2 + (3 * 4)`` style spacing."""
    text = ""
    for tok in tokens:
        if tok == "(":
            text += ("" if not text or text.endswith("(") else " ") + "("
        elif tok == ")":
            text += ")"
        else:
            piece = str(tok)
            text += piece if (not text or text.endswith("(")) else " " + piece
    return text


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _innermost_span(tokens: list) -> tuple[int, int]:
    """Span [lo, hi) of the innermost parenthesised group's contents, or the whole
    list."""
    start = None
    for i, tok in enumerate(tokens):
        if tok == "(":
            start = i
        elif tok == ")":
            if start is None:
                raise ValueError(f"unbalanced ')' in {format_tokens(tokens)!r}")
            return start + 1, i
    if start is not None:
        raise ValueError(f"unbalanced '(' in {format_tokens(tokens)!r}")
    return 0, len(tokens)


def next_step(tokens: list,
              precedence: bool = True) -> tuple[tuple[int, str, int, int], list]:
    """One reduction step: ``((a, op, b, result), new_tokens)``.

    Parentheses first (innermost, leftmost); inside a group ``*`` before ``+``/``-``
    when ``precedence`` is True, otherwise strictly left to right (the designed
    mistake). A group reduced to one number keeps its parentheses, ``(14)``, which
    :func:`solve_steps` drops (:func:`_bare_numbers`).
    """
    lo, hi = _innermost_span(tokens)
    inner = tokens[lo:hi]
    if len(inner) < 3:
        raise ValueError(f"nothing to reduce in {format_tokens(tokens)!r}")
    k = 1
    if precedence and "*" in inner[1::2]:
        k = inner.index("*", 1)
    a, op, b = inner[k - 1], inner[k], inner[k + 1]
    value = _apply(a, op, b)
    inner = inner[: k - 1] + [value] + inner[k + 2:]
    return (a, op, b, value), tokens[:lo] + inner + tokens[hi:]


def solve_steps(question: str,
                precedence: bool = True) -> list[tuple[int, str, int, int, str]]:
    """All reduction steps ``(a, op, b, result, remaining_expression)`` of
    ``question``."""
    tokens = _bare_numbers(well_formed_tokens(question))
    steps = []
    while len(tokens) > 1:
        (a, op, b, value), tokens = next_step(tokens, precedence)
        tokens = _bare_numbers(tokens)  # "((1 + 1))" -> "(2)" -> "2"
        steps.append((a, op, b, value, format_tokens(tokens)))
    return steps


def evaluate_expression(question: str, precedence: bool = True) -> int:
    """Exact integer value (with or without operator precedence); a ValueError that
    says what is wrong for anything but whole numbers joined by ``+ - *`` with
    balanced parentheses."""
    steps = solve_steps(question, precedence)  # checks the expression first
    return steps[-1][3] if steps else int(question.strip(" ()"))  # "((7))": 7


def well_formed_tokens(text: str) -> list:
    """:func:`tokenize_expression` of ``text``, checked to be whole numbers joined by
    ``+ - *`` with balanced parentheses (``"2 + (3 * 4)"``); raises a ValueError that
    names the first token out of place (``"2 +"``, ``"2 3"``, ``"2 ** 3"``, ``""``)."""
    tokens, depth, want_number = tokenize_expression(text), 0, True
    for i, tok in enumerate(tokens):
        if want_number and tok == "(":
            depth += 1
        elif want_number and isinstance(tok, int):
            want_number = False
        elif not want_number and tok == ")" and depth > 0:
            depth -= 1
        elif not want_number and tok in ("+", "-", "*"):
            want_number = True
        else:
            wanted = "a number" if want_number else "an operator"
            what = "an unbalanced ')'" if tok == ")" and not want_number else repr(tok)
            raise ValueError(f"{text!r} is not an expression of whole numbers, + - * "
                             f"and parentheses: {what} (token {i + 1}) where "
                             f"{wanted} should be")
    if want_number or depth:
        where = ("where a number should be" if want_number
                 else f"with {depth} unbalanced '('")
        raise ValueError(f"{text!r} is not an expression of whole numbers, + - * and "
                         f"parentheses: it ends {where}")
    return tokens


def _bare_numbers(tokens: list) -> list:
    """``tokens`` with every ``( n )`` around a lone number replaced by ``n``."""
    out, i = list(tokens), 0
    while i + 2 < len(out):
        if out[i] == "(" and isinstance(out[i + 1], int) and out[i + 2] == ")":
            out[i:i + 3] = [out[i + 1]]
            i = max(i - 1, 0)
        else:
            i += 1
    return out


# --------------------------------------------------------------------------- problems
@dataclass
class Difficulty:
    """Knobs of the problem generator."""

    min_operands: int = 2
    max_operands: int = 4
    max_operand: int = 9  # operands are drawn from 1..max_operand
    paren_prob: float = 0.25  # chance of one pair of parentheses (3+ operands)
    # every intermediate value, in both evaluation orders, lies in [0, max_value]
    max_value: int = 99
    op_weights: tuple = (1.0, 1.0, 1.0)  # relative weights of + - *
    operand_weights: tuple = (0.1, 0.45, 0.45)  # chance of min_operands, +1, +2, ...
    # chance to redraw a problem where precedence changes nothing
    precedence_bias: float = 0.7

    def __post_init__(self):
        if not 2 <= self.min_operands <= self.max_operands:
            raise ValueError(f"need 2 <= min_operands <= max_operands, got "
                             f"{self.min_operands}..{self.max_operands}")
        if self.max_operand < 1 or self.max_value < self.max_operand:
            raise ValueError(f"need 1 <= max_operand <= max_value, got "
                             f"{self.max_operand}, {self.max_value}")


@dataclass
class Problem:
    question: str
    answer: int
    num_operands: int
    has_parens: bool
    precedence_matters: bool
    steps: list = field(default_factory=list)

    def row(self) -> dict:
        return {"question": self.question, "answer": str(self.answer),
                "num_operands": self.num_operands, "has_parens": self.has_parens,
                "precedence_matters": self.precedence_matters}

    @classmethod
    def from_row(cls, row: dict) -> "Problem":
        """The inverse of :meth:`row` (a line of a split), with its solution steps."""
        return cls(row["question"], int(row["answer"]), row["num_operands"],
                   row["has_parens"], row["precedence_matters"],
                   solve_steps(row["question"]))


def _values_ok(question: str, difficulty: Difficulty) -> bool:
    for precedence in (True, False):
        for *_, value, _rest in solve_steps(question, precedence):
            if not 0 <= value <= difficulty.max_value:
                return False
    return True


def random_problem(rng: random.Random, difficulty: Difficulty | None = None,
                   max_tries: int = 1000) -> Problem:
    """Draw one problem whose every intermediate value respects ``difficulty``."""
    d = difficulty or Difficulty()
    for _ in range(max_tries):
        counts = list(range(d.min_operands, d.max_operands + 1))
        weights = list(d.operand_weights[: len(counts)])
        weights += [1.0] * (len(counts) - len(d.operand_weights))
        n = rng.choices(counts, weights=weights)[0]
        nums = [rng.randint(1, d.max_operand) for _ in range(n)]
        ops = rng.choices(OPS, weights=d.op_weights, k=n - 1)
        tokens: list = [nums[0]]
        for op, num in zip(ops, nums[1:]):
            tokens += [op, num]
        has_parens = n >= 3 and rng.random() < d.paren_prob
        if has_parens:  # wrap operands i..j (2 <= width < n)
            width = rng.randint(2, n - 1)
            i = rng.randint(0, n - width)
            lo, hi = 2 * i, 2 * (i + width - 1) + 1
            tokens = tokens[:lo] + ["("] + tokens[lo:hi] + [")"] + tokens[hi:]
        question = format_tokens(tokens)
        if not _values_ok(question, d):
            continue
        answer = evaluate_expression(question, True)
        ltr = evaluate_expression(question, False)
        if ltr == answer and rng.random() < d.precedence_bias:
            continue
        return Problem(question, answer, n, has_parens, ltr != answer,
                       solve_steps(question, True))
    raise RuntimeError(f"could not draw a problem within {max_tries} tries for {d}; "
                       f"loosen max_value or max_operand")


def make_problems(n: int, seed: int = 0, difficulty: Difficulty | None = None,
                  exclude: set[str] | None = None) -> list[Problem]:
    """``n`` distinct problems (by question text), none in ``exclude``."""
    rng = random.Random(seed)
    seen = set(exclude or ())
    out: list[Problem] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise RuntimeError(f"only {len(out)} distinct problems found for n={n}; "
                               f"the difficulty allows too few distinct expressions")
        p = random_problem(rng, difficulty)
        if p.question in seen:
            continue
        seen.add(p.question)
        out.append(p)
    return out


def write_splits(out_dir: str | Path = DATA_DIR, n_train: int = 20000,
                 n_test: int = 1000, seed: int = 0) -> dict[str, Path]:
    """Write ``test.jsonl`` then ``train.jsonl`` (no question in both) under
    ``out_dir``."""
    from . import write_jsonl

    out = Path(out_dir)
    test = make_problems(n_test, seed=seed + 1)
    train = make_problems(n_train, seed=seed + 2, exclude={p.question for p in test})
    paths = {}
    for name, problems in (("test", test), ("train", train)):
        path = write_jsonl((p.row() for p in problems), out / f"{name}.jsonl")
        paths[name] = path
        print(f"wrote {len(problems)} problems to {path}")
    return paths


def read_rows(split: str = "train", data_dir: str | Path = DATA_DIR) -> list[dict]:
    """The committed split's rows (question, answer, num_operands, ...) as plain
    dicts."""
    path = Path(data_dir) / f"{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist. Create the splits with "
            f"`python -m grpo_lib make-data --out {Path(data_dir)}`.")
    return read_jsonl(path)  # a damaged line: an error that names it


PROMPT_LANGUAGES = {  # language of a split's questions -> prompt of row i
    "en": lambda q, i: chat_prompt(q),
    "zh": chinese_prompt,
    "en+zh": bilingual_prompt,
}


def load_split(split: str = "train", data_dir: str | Path = DATA_DIR,
               language: str = "en"):
    """The committed split as a ``datasets.Dataset`` with a chat ``prompt`` column,
    asked in English (``"en"``), in Chinese (``"zh"``) or alternately (``"en+zh"``)."""
    from datasets import Dataset

    if language not in PROMPT_LANGUAGES:
        raise ValueError(f"language must be one of {sorted(PROMPT_LANGUAGES)}, got "
                         f"{language!r}.")
    rows = read_rows(split, data_dir)
    for i, r in enumerate(rows):
        r["prompt"] = PROMPT_LANGUAGES[language](r["question"], i)
    return Dataset.from_list(rows)
