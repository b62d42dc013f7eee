"""Parsing model outputs: answers, numbers, tags, scripts, repetition, self-correction.

Shared by the reward functions (:mod:`grpo_lib.rewards`) and the evaluation harness, so
that "the answer", "well formatted" and "correct" mean the same thing everywhere.

The response format (DeepSeek-R1-Zero's template)::

    <think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>

Design rules, the same for every function here:

* **Never raise on model output.** ``None``, non-strings, empty strings, megabytes of
  text, injected tags and unicode digits all give a defined result (``None``, ``False``
  or ``0.0``).
* **Linear time.** Tags are found with ``str.find``/``rfind``; the few regular
  expressions have no nested or overlapping quantifiers, so a 1 MB adversarial input
  (e.g. ``"<think>" * 100_000``) takes milliseconds, never catastrophic backtracking.
* **Bounded work for heavy tools.** ``math_verify`` (sympy) only sees short strings
  that passed a whitelist (no ``\\Gamma(10^9)``, no ``9^{9^{9^9}}``); see
  :func:`answers_equal`.
* **Unicode digits count as digits.** Every character of Unicode category ``Nd`` is
  mapped to its ASCII digit before parsing (``'١٤'`` and ``'１４'`` both read as
  ``14``): a model that writes Arabic-Indic or full-width digits has still computed the
  number.
"""
from __future__ import annotations

import logging
import re
import unicodedata
from fractions import Fraction
from typing import Any

__all__ = [
    "THINK_OPEN", "THINK_CLOSE", "ANSWER_OPEN", "ANSWER_CLOSE", "MAX_NUMBER_DIGITS",
    "MAX_MATH_VERIFY_CHARS", "SELF_CORRECTION_PHRASES", "completion_text",
    "normalize_digits", "extract_answer", "parse_number", "answers_equal", "think_text",
    "has_cjk", "script_counts", "is_well_formatted", "repeated_ngram_fraction",
    "has_self_correction",
]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)

MAX_NUMBER_DIGITS = 1000
"""Longest digit run :func:`parse_number` turns into a value. Python's ``int()`` refuses
strings over 4,300 digits (a guard against quadratic conversion); longer integers are
compared as canonical digit strings instead (see :func:`answers_equal`)."""

MAX_MATH_VERIFY_CHARS = 200
"""Longest answer string handed to ``math_verify``; longer ones are compared as text."""


def completion_text(completion: Any, _depth: int = 0) -> str | None:
    """The text of one completion, or ``None`` when it is not text.

    Accepts a plain string (this library's convention) and TRL's conversational form
    (a list of ``{"role", "content"}`` messages, or one such dict): the last message's
    content is the completion. Anything else (``None``, numbers, NaN) gives ``None``.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        content = completion.get("content")
        return content if isinstance(content, str) else None
    if isinstance(completion, (list, tuple)) and completion and _depth < 64:
        return completion_text(completion[-1], _depth + 1)  # a list in itself: None
    return None


# ----------------------------------------------------------------------------- digits
_NON_ASCII_DIGIT = re.compile(r"[^\x00-\x7f]")


def _ascii_digit(match: re.Match) -> str:
    char = match.group()
    value = unicodedata.decimal(char, None)
    if value is not None:
        return str(value)
    if char in "\u2212\u2012\u2013\uff0d":  # minus sign, figure/en dash, full width
        return "-"
    return char


def normalize_digits(text: str) -> str:
    """Map every Unicode decimal digit (category ``Nd``) to ASCII ``0-9``.

    ``'١٤'`` (Arabic-Indic) and ``'１４'`` (full width) become ``'14'``; the Unicode
    minus sign ``'−'`` becomes ``'-'``. Superscripts such as ``'²'`` are not decimal
    digits and are left alone. ASCII text is returned unchanged without a scan.
    """
    if not isinstance(text, str) or text.isascii():
        return text
    return _NON_ASCII_DIGIT.sub(_ascii_digit, text)


# ----------------------------------------------------------------------------- answers
def extract_answer(text: Any, strict: bool = True) -> str | None:
    """The model's final answer as a string, or ``None`` when there is none.

    * ``strict=True`` — the content of the **last** ``<answer>…</answer>`` block: the
      last ``</answer>`` and the last ``<answer>`` before it, stripped. Injected tags
      cannot smuggle text in: ``"<answer> 20 </answer><answer>14</answer>"`` and
      ``"<answer> 20 <answer> 14 </answer>"`` both give ``"14"``. An unclosed block
      gives ``None``.
    * ``strict=False`` — the **last number** anywhere in the text (digits with an
      optional sign, thousands commas and decimal part), as GSM8K-style graders do.
      Unicode digits are normalised to ASCII. A minus sign counts only where it cannot
      be a binary minus: in ``"5-3"`` the last number is ``"3"``.
    """
    text = completion_text(text)
    if text is None:
        return None
    if strict:
        end = text.rfind(ANSWER_CLOSE)
        if end < 0:
            return None
        start = text.rfind(ANSWER_OPEN, 0, end)
        if start < 0:
            return None
        return text[start + len(ANSWER_OPEN):end].strip()
    return _last_number(normalize_digits(text))


_NUMBER_IN_TEXT = re.compile(  # 1,234.5 or .5, each with an optional minus sign
    r"(?:(?<![0-9A-Za-z)\]}])-)?(?:[0-9]+(?:,[0-9]{3}(?![0-9]))*(?:\.[0-9]+)?|\.[0-9]+)"
)


def _last_number(text: str) -> str | None:
    # Find the last digit with ten C-level rfind calls, back up over the number's own
    # characters, and run the regex on that small window only (O(len(text)) overall).
    last_digit = max(text.rfind(d) for d in "0123456789")
    if last_digit < 0:
        return None
    start = last_digit
    while start > 0 and text[start - 1] in "0123456789.,":
        start -= 1
    window = text[max(0, start - 2):last_digit + 1]
    found = None
    for found in _NUMBER_IN_TEXT.finditer(window):
        pass
    return found.group().replace(",", "") if found else None


_PLAIN_NUMBER = re.compile(
    r"[+-]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]{1,3})?"
    r"|[+-]?\.[0-9]+(?:[eE][+-]?[0-9]{1,3})?"
)
_FRACTION = re.compile(r"([+-]?[0-9]+)\s*/\s*([0-9]+)")
_LONG_INTEGER = re.compile(r"[+-]?[0-9]+")


def _strip_wrappers(s: str) -> str:
    """Remove what wraps a value without changing it: spaces, ``$…$``, ``\\boxed{…}``,
    ``\\(…\\)``, ``\\text{…}``, a trailing full stop."""
    s = s.strip()
    for _ in range(4):  # a few layers at most: "$\\boxed{14}$."
        before = s
        if s.endswith(".") and not s.endswith(".."):
            s = s[:-1].rstrip()
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s.strip("$").strip()
        if s.startswith("\\(") and s.endswith("\\)"):
            s = s[2:-2].strip()
        for command in ("\\boxed{", "\\text{", "\\mathrm{"):
            if s.startswith(command) and s.endswith("}"):
                s = s[len(command):-1].strip()
        if s == before:
            break
    return s


def parse_number(s: Any) -> Fraction | None:
    r"""The exact value of a plain number written as text, or ``None``.

    Accepted: an optional sign; digits with optional thousands commas (``"1,000"``); an
    optional decimal part; an optional exponent of at most three digits (``"1.5e3"``);
    or a simple fraction ``"a/b"`` with integers ``a`` and ``b \neq 0``. Surrounding
    spaces, ``$…$`` and ``\boxed{…}`` are ignored; unicode digits are read as digits.
    The result is a :class:`fractions.Fraction`, so ``parse_number("14") ==
    parse_number("14.0") == 14`` and ``parse_number("0.1") == Fraction(1, 10)`` exactly.

    ``None`` for anything else: words, expressions (``"2 + 12"``), ``"nan"``, ``"inf"``,
    and text longer than :data:`MAX_NUMBER_DIGITS` + 16 characters (Python's ``int()``
    raises above 4,300 digits; :func:`answers_equal` compares those as digit strings).
    """
    if isinstance(s, bool):
        return None
    if isinstance(s, int):
        return Fraction(s)
    if isinstance(s, float):
        return Fraction(repr(s)) if s == s and abs(s) != float("inf") else None
    if not isinstance(s, str) or len(s) > MAX_NUMBER_DIGITS + 16:
        return None
    s = _strip_wrappers(normalize_digits(s))
    if _PLAIN_NUMBER.fullmatch(s):
        return Fraction(s.replace(",", ""))
    fraction = _FRACTION.fullmatch(s)
    if fraction and int(fraction.group(2)) != 0:
        return Fraction(int(fraction.group(1)), int(fraction.group(2)))
    return None


def _canonical_integer(s: str) -> str | None:
    """``"+000123"`` -> ``"123"``; ``None`` unless ``s`` is a (maybe huge) integer."""
    if not _LONG_INTEGER.fullmatch(s):
        return None
    sign = "-" if s[0] == "-" else ""
    digits = s.lstrip("+-").lstrip("0") or "0"
    return ("" if digits == "0" else sign) + digits


# Only short answers made of these pieces reach math_verify. sympy evaluates some inputs
# eagerly and for a very long time (9^{9^{9^9}}, \Gamma(99999999), "2^100000!",
# \binom{10^11}{10^9}), and math_verify's own timeout relies on signal.alarm, which
# works only in the main thread; so the guard is ours: no factorials, small exponents,
# short digit runs, and only known LaTeX commands and words.
_ALLOWED_WORDS = frozenset(
    "frac dfrac tfrac sqrt pi cdot times div left right boxed text mathrm mathbf "
    "infty inf pm mp le ge leq geq neq ne lt gt in cup cap circ degree percent dots "
    "ldots quad qquad displaystyle".split()
)
_WORD = re.compile(r"[A-Za-z]+")
_LONG_DIGIT_RUN = re.compile(r"[0-9]{31}")
_SMALL_EXPONENT = re.compile(
    r"\^(?:-?[0-9]{1,2}|[A-Za-z]|\{\s*-?(?:[0-9]{1,2}|[A-Za-z])\s*\})"
)


def _safe_for_math_verify(s: str) -> bool:
    if len(s) > MAX_MATH_VERIFY_CHARS or "!" in s or "**" in s or "_" in s:
        return False
    if _LONG_DIGIT_RUN.search(s):
        return False
    if s.count("^") != len(_SMALL_EXPONENT.findall(s)) or _power_tower(s):
        return False  # each ^: a literal exponent of <= 2 digits; no towers (below)
    return all(len(w) == 1 or w.lower() in _ALLOWED_WORDS for w in _WORD.findall(s))


# A single closed-form value in LaTeX: [-] \frac{a}{b} (also \dfrac, \tfrac, \frac12),
# [n]\sqrt{m}. The only non-plain predictions compared with a plain-number gold.
_NUM_ARG = r"(?:\{\s*-?[0-9.]+\s*\}|[0-9])"
_LATEX_VALUE = re.compile(
    r"-?\s*(?:\\[dt]?frac\s*" + _NUM_ARG + r"\s*" + _NUM_ARG
    + r"|(?:[0-9]+\s*)?\\sqrt\s*\{\s*[0-9.]+\s*\})"
)


class _DropTimeoutWarning(logging.Filter):
    """math_verify warns once that its timeout is off; we bound its input ourselves."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


_MATH_VERIFY = None


def _math_verify():
    global _MATH_VERIFY
    if _MATH_VERIFY is None:
        import math_verify

        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_DropTimeoutWarning())
        _MATH_VERIFY = math_verify
    return _MATH_VERIFY


def _latex_equal(pred: str, gold: str) -> bool:
    """``math_verify.verify(parse(gold), parse(pred))``, timeouts off (thread safe)."""
    mv = _math_verify()

    def parse(s: str):
        if "\\" in s and "$" not in s:
            s = f"${s}$"  # math_verify looks for LaTeX inside math delimiters
        return mv.parse(s, parsing_timeout=None)

    try:
        gold_parsed, pred_parsed = parse(gold), parse(pred)
        if not gold_parsed or not pred_parsed:
            return False
        return bool(mv.verify(gold_parsed, pred_parsed, timeout_seconds=None))
    except Exception:  # noqa: BLE001 - a grader never crashes on model output
        return False


def _clean_answer(s: Any) -> str | None:
    if isinstance(s, bool) or s is None:
        return None
    if isinstance(s, (int, float)):  # an int past str()'s digit limit: no answer
        s = repr(s) if isinstance(s, float) else _int_text(s)
    if not isinstance(s, str):
        return None
    s = normalize_digits(s) if not _digit_lookalike(s) else ""  # '2³' is not 23
    if len(s) <= MAX_MATH_VERIFY_CHARS:
        s = unicodedata.normalize("NFKC", s)
    return " ".join(_strip_wrappers(s).split())


def answers_equal(pred: Any, gold: Any) -> bool:
    r"""Whether a predicted answer equals the gold answer.

    Checked in this order (both sides cleaned first: unicode digits to ASCII, spaces
    collapsed, ``$…$``/``\boxed{…}`` unwrapped):

    1. **Same text** → equal (this alone settles huge inputs, e.g. a 100,000-digit
       number that equals the gold digit for digit).
    2. **Both plain numbers** (:func:`parse_number`) → exact rational equality:
       ``14 == 14.0 == "14" == " 14 " == "28/2"``, while ``"0.333333" != "1/3"``.
       Integers longer than :data:`MAX_NUMBER_DIGITS` digits are compared as canonical
       digit strings (leading zeros and ``+`` dropped) — never through ``int()``.
    3. **Plain-number gold** (the arithmetic and GSM8K tasks): besides a plain number,
       only a single closed-form LaTeX value is accepted — ``\frac{a}{b}`` (also
       ``\dfrac``, ``\tfrac``) or ``n\sqrt{m}`` — and compared by ``math_verify``
       (``\frac{1}{2}`` equals ``0.5``). Anything else is *not evaluated*: an expression
       (``"2 + 3 * 4"`` — copying the question would otherwise be graded correct, since
       sympy computes 14), a hedge (``"20 or 14"``), words (``"14 apples"``).
    4. **Other golds** (LaTeX such as ``\frac{\sqrt{3}}{2}``) → ``math_verify`` on both,
       as Open-R1 does, but only for strings of at most :data:`MAX_MATH_VERIFY_CHARS`
       characters that pass a whitelist (known LaTeX commands and words, exponents of at
       most two digits, no factorials: ``\Gamma(99999999)`` or ``9^{9^{9^9}}`` would
       keep sympy busy for minutes). Its signal-based timeout is turned off, so this
       works from any thread; the whitelist is what bounds the work.

    ``None``, non-strings and NaN never equal anything.
    """
    p, g = _clean_answer(pred), _clean_answer(gold)
    if not p or not g:
        return False
    if p == g:
        return p.lower() not in ("nan", "+nan", "-nan")
    gold_value, pred_value = parse_number(g), parse_number(p)
    if gold_value is not None and pred_value is not None:
        return gold_value == pred_value
    long_gold, long_pred = _canonical_integer(g), _canonical_integer(p)
    if long_gold is not None and long_pred is not None:
        return long_gold == long_pred
    if long_gold is not None and len(g) > MAX_NUMBER_DIGITS:
        return False  # a huge integer gold only equals the same digit string
    if gold_value is not None:
        return (_LATEX_VALUE.fullmatch(p) is not None and _safe_for_math_verify(p)
                and _latex_equal(p, g))
    if not (_safe_for_math_verify(p) and _safe_for_math_verify(g)):
        return False
    return _latex_equal(p, g)


# ----------------------------------------------------------------------------- tags
def think_text(text: Any) -> str | None:
    """The reasoning: the stripped text of the first ``<think>…</think>`` block.

    When the completion has a ``</think>`` but no ``<think>`` before it (the prompt
    ended with ``<think>``, as in GRPO-Zero's template), the text before ``</think>`` is
    the reasoning. ``None`` when there is no closed think block.
    """
    text = completion_text(text)
    if text is None:
        return None
    start = text.find(THINK_OPEN)
    if start >= 0:
        end = text.find(THINK_CLOSE, start)
        return text[start + len(THINK_OPEN):end].strip() if end >= 0 else None
    end = text.find(THINK_CLOSE)
    return text[:end].strip() if end >= 0 else None


def is_well_formatted(text: Any, strict: bool = True) -> bool:
    r"""Whether the completion follows ``<think> … </think> <answer> … </answer>``.

    * ``strict=True`` — the **whole** completion is exactly one think block followed
      by one answer block: ``^\s*<think>T</think>\s*<answer>A</answer>\s*$`` where
      ``T`` and ``A`` are non-blank and contain none of the four tags (so no nesting,
      no repeats, no text outside the blocks). Empty blocks do not count:
      ``<think></think>`` is not reasoning.
    * ``strict=False`` — a think block and, after it, an answer block appear somewhere
      (text around them and extra tags are allowed).

    Implemented with ``str.find``/``count``: linear time on any input.
    """
    text = completion_text(text)
    if text is None:
        return False
    if not strict:
        # the first <think>, then </think>, <answer>, </answer>, each after the last
        position = 0
        for tag in _TAGS:
            found = text.find(tag, position)
            if found < 0:
                return False
            position = found + len(tag)
        return True
    body = text.strip()
    if any(body.count(tag) != 1 for tag in _TAGS):
        return False
    t_close, a_open = body.find(THINK_CLOSE), body.find(ANSWER_OPEN)
    if not (body.startswith(THINK_OPEN) and body.endswith(ANSWER_CLOSE)):
        return False
    if not t_close < a_open or body[t_close + len(THINK_CLOSE):a_open].strip():
        return False
    reasoning = body[len(THINK_OPEN):t_close]
    answer = body[a_open + len(ANSWER_OPEN):-len(ANSWER_CLOSE)]
    return bool(reasoning.strip()) and bool(answer.strip())


# ----------------------------------------------------------------------------- scripts
_CJK_CHAR = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
    "\U00020000-\U0002ffff]"
)
_HAN_CHAR = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f]+")


def has_cjk(text: Any) -> bool:
    """Whether the text contains a CJK character (Han, Hiragana, Katakana or Hangul).

    The evaluation harness runs it on whole completions to count language mixing.
    """
    text = completion_text(text)
    return bool(text) and _CJK_CHAR.search(text) is not None


def script_counts(text: Any) -> dict[str, int]:
    """Language units per script: ``{"latin": words, "cjk": characters, "other": …}``.

    A unit is a maximal run of Latin letters (one English *word*) or a single CJK
    character (Chinese writes one morpheme per character and no spaces, so a character
    is the natural unit). Digits, punctuation, math symbols and tags belong to no
    language and are not counted. ``"other"`` counts words in any other alphabet
    (Cyrillic, Greek, Arabic, ...). Example: ``"3 * 4 = 12, 所以 the answer"`` has
    2 Latin words and 2 CJK characters.
    """
    text = completion_text(text)
    if not text:
        return {"latin": 0, "cjk": 0, "other": 0}
    for tag in _TAGS:
        text = text.replace(tag, " ")
    latin = len(_LATIN_WORD.findall(text))
    cjk = len(_CJK_CHAR.findall(text))
    rest = _CJK_CHAR.sub(" ", _LATIN_WORD.sub(" ", text))
    other = sum(1 for w in re.findall(r"[^\W\d_]+", rest))
    return {"latin": latin, "cjk": cjk, "other": other}


# ----------------------------------------------------------------------- degeneration
def repeated_ngram_fraction(text: Any, n: int = 3) -> float:
    r"""Share of repeated word n-grams: :math:`1 - \frac{\#\text{distinct n-grams}}
    {\#\text{n-grams}}` over lower-cased whitespace-separated words.

    ``0.0`` for text with fewer than ``n`` words (nothing can repeat). ``"a b c a b c"``
    with ``n=3`` has 4 trigrams of which 3 are distinct: ``1 - 3/4 = 0.25``. This is the
    quantity behind Open-R1's repetition penalty (Yeo et al. 2025, appendix C.2).
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer (the n-gram size), got {n!r}")
    text = completion_text(text)
    if not text:
        return 0.0
    words = text.lower().split()
    total = len(words) - n + 1
    if total <= 0:
        return 0.0
    distinct = len(set(zip(*(words[i:] for i in range(n)))))
    return 1.0 - distinct / total


SELF_CORRECTION_PHRASES = (
    "wait", "recheck", "re-check", "double-check", "double check", "let me check",
    "let me verify", "let me re-evaluate", "let me reconsider", "on second thought",
    "i made a mistake", "that is wrong", "that's wrong", "aha",
    "等等", "等一下", "重新检查", "检查一下",
)
_SELF_CORRECTION = re.compile(
    r"(?<![A-Za-z])(?:" + "|".join(re.escape(p) for p in SELF_CORRECTION_PHRASES)
    + r")(?![A-Za-z])",
    re.IGNORECASE,
)


def has_self_correction(text: Any) -> bool:
    """Whether the text re-examines itself ("wait, ...", "let me recheck", "等等", ...).

    A word-bounded, case-insensitive search for :data:`SELF_CORRECTION_PHRASES`; the
    "aha moment" of the R1 paper is a rise of exactly these phrases during RL.
    """
    text = completion_text(text)
    return bool(text) and _SELF_CORRECTION.search(text) is not None


_POWER_TOWER = re.compile(r"\^\s*(?:-?[0-9]{1,2}|[A-Za-z]|\{[^{}]*\})\s*\^")


def _power_tower(s: str) -> bool:
    """Whether ``s`` could make sympy build a huge power: a tower ``a^b^c`` (read
    ``a^(b^c)``: ``9^9^9`` has 369 million digits), a power of a bracket that holds a
    power (``(99^99)^99``), or more than two ``^`` in all. Not evaluated."""
    if s.count("^") > 2 or _POWER_TOWER.search(s) is not None:
        return True
    for end in (i for i in range(1, len(s)) if s[i] == "^" and s[i - 1] in ")}]"):
        depth, start = 0, end - 1
        while start >= 0:  # back to the bracket that opens the powered group
            depth += (s[start] in ")}]") - (s[start] in "({[")
            if depth == 0:
                break
            start -= 1
        if "^" in s[max(start, 0):end]:
            return True
    return False


def _digit_lookalike(s: str) -> bool:
    """Whether ``s`` holds a character with a digit's value that is not a decimal
    digit: a superscript, subscript or circled digit (``'²'``, ``'₃'``, ``'①'``),
    which NFKC would turn into a plain digit (``'2³'`` into ``'23'``)."""
    return not s.isascii() and any(
        not ch.isdecimal() and unicodedata.digit(ch, None) is not None for ch in s)


def _int_text(n: int) -> str:
    """``str(n)``, or ``""`` for an int with more digits than Python converts to text
    (``sys.get_int_max_str_digits()``, 4,300 by default), which no gold is."""
    try:
        return str(n)
    except ValueError:
        return ""
