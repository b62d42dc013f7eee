"""Tests for grpo_lib.parsing: known values, adversarial inputs, linear time."""
import re
import time
from fractions import Fraction

import pytest

from grpo_lib.parsing import (
    answers_equal, completion_text, extract_answer, has_cjk, has_self_correction,
    is_well_formatted, normalize_digits, parse_number, repeated_ngram_fraction,
    script_counts, think_text,
)

O2 = "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>"
MB = 1_000_000


@pytest.fixture(scope="module", autouse=True)
def warm_math_verify():
    """Import sympy/math_verify once so the timing asserts measure the work, not imports."""
    assert answers_equal("\\frac{1}{2}", "0.5")


def timed(fn, *args, limit=1.0, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    elapsed = time.perf_counter() - start
    assert elapsed < limit, f"{fn.__name__} took {elapsed:.2f}s (limit {limit}s)"
    return result


# ----------------------------------------------------------------------------- text
def test_completion_text_accepts_strings_and_chat_messages():
    assert completion_text("abc") == "abc"
    assert completion_text([{"role": "assistant", "content": "abc"}]) == "abc"
    assert completion_text({"role": "assistant", "content": "x"}) == "x"
    for bad in (None, 3.5, float("nan"), [], [{"role": "assistant"}], b"bytes"):
        assert completion_text(bad) is None
    itself, deep = [], ["x"]
    itself.append(itself)  # a list that holds itself recursed without end
    for _ in range(5000):
        deep = [deep]
    assert completion_text(itself) is None and completion_text(deep) is None
    assert completion_text([[[{"role": "assistant", "content": "y"}]]]) == "y"


def test_normalize_digits():
    assert normalize_digits("١٤") == "14"          # Arabic-Indic
    assert normalize_digits("１４") == "14"        # full width
    assert normalize_digits("۱۴ and ४२") == "14 and 42"  # Persian, Devanagari
    assert normalize_digits("−7") == "-7"          # unicode minus sign
    assert normalize_digits("x²") == "x²"          # a superscript is not a decimal digit
    assert normalize_digits("plain 14") == "plain 14"


# ----------------------------------------------------------------------------- answers
def test_extract_answer_strict():
    assert extract_answer(O2) == "14"
    assert extract_answer("<answer>\n 7 \n</answer>") == "7"
    assert extract_answer("<answer> 20 </answer><answer>14</answer>") == "14"
    assert extract_answer("<answer> 20 <answer> 14 </answer>") == "14"
    assert extract_answer("<answer> 20 </answer> trailing 99") == "20"
    assert extract_answer("<answer> 14") is None          # unclosed (truncated)
    assert extract_answer("14 </answer>") is None         # no opening tag
    assert extract_answer("the answer is 14") is None
    assert extract_answer("<answer></answer>") == ""
    for bad in (None, 12, "", float("nan")):
        assert extract_answer(bad) is None


def test_extract_answer_lenient_last_number():
    assert extract_answer("2 + 3 = 5, 5 * 4 = 20", strict=False) == "20"
    assert extract_answer("x = -3", strict=False) == "-3"
    assert extract_answer("so 5-3", strict=False) == "3"       # binary minus is not a sign
    assert extract_answer("total 1,234.5 apples.", strict=False) == "1234.5"
    assert extract_answer("lists 5, 6", strict=False) == "6"
    assert extract_answer("答案是 １４", strict=False) == "14"
    assert extract_answer("no digits here", strict=False) is None
    assert extract_answer(None, strict=False) is None


def test_extract_answer_lenient_matches_full_scan_on_random_text():
    """The windowed last-number search agrees with a plain finditer over the whole text."""
    import random

    pattern = re.compile(  # the library's pattern: 1,234.5 or .5, maybe with a minus
        r"(?:(?<![0-9A-Za-z)\]}])-)?(?:[0-9]+(?:,[0-9]{3}(?![0-9]))*(?:\.[0-9]+)?"
        r"|\.[0-9]+)")
    rng = random.Random(0)
    for _ in range(500):
        text = "".join(rng.choice("0123456789 ,.-xa)") for _ in range(rng.randint(0, 30)))
        matches = list(pattern.finditer(text))
        expected = matches[-1].group().replace(",", "") if matches else None
        assert extract_answer(text, strict=False) == expected, text


def test_extract_answer_lenient_reads_a_leading_decimal_point():
    """'.5' is a half, not a five (a lenient grader would pay 5 for it)."""
    assert extract_answer("The answer is .5", strict=False) == ".5"
    assert extract_answer("x = -.5", strict=False) == "-.5"
    assert extract_answer("The answer is 5.", strict=False) == "5"
    assert extract_answer("it costs 1,234.5 in all", strict=False) == "1234.5"


def test_parse_number_values():
    assert parse_number("14") == 14
    assert parse_number(" 14.0 ") == 14
    assert parse_number("-3.5") == Fraction(-7, 2)
    assert parse_number("0.1") == Fraction(1, 10)
    assert parse_number("1,000") == 1000
    assert parse_number("1.5e3") == 1500
    assert parse_number("1/2") == Fraction(1, 2)
    assert parse_number("$\\boxed{14}$") == 14
    assert parse_number("١٤") == 14
    assert parse_number(14) == 14 and parse_number(0.5) == Fraction(1, 2)
    for bad in ("2 + 12", "nan", "inf", "fourteen", "1/0", "", None, True, float("nan"),
                "1,00", "1e99999", "9" * 5000):
        assert parse_number(bad) is None, bad


def test_answers_equal_numeric_equivalence():
    for pred in ("14", "14.0", " 14 ", "+14", "014", "１４", "١٤", "28/2", "$14$",
                 "\\boxed{14}", "14."):
        assert answers_equal(pred, "14"), pred
    assert answers_equal("14", 14) and answers_equal("14.0", 14.0)
    assert not answers_equal("-14", "14")
    assert not answers_equal("14.000001", "14")
    assert not answers_equal("0.333333", "1/3")  # plain numbers compare exactly


def test_answers_equal_latex_through_math_verify():
    assert timed(answers_equal, "\\frac{1}{2}", "0.5")
    assert timed(answers_equal, "0.5", "\\frac{1}{2}")
    assert timed(answers_equal, "\\frac{28}{2}", "14")
    assert not timed(answers_equal, "\\frac{1}{3}", "0.5")
    assert timed(answers_equal, "\\sqrt{2}", "\\sqrt{2}")


def test_answers_equal_rejects_expressions_for_numeric_gold():
    """Copying the question would otherwise be rewarded: sympy evaluates 2+3*4 = 14."""
    for pred in ("2 + 3 * 4", "2+12", "$2+12$", "7*2", "20 - 6", "x = 14", "2^3 + 6",
                 "\\frac{28}{2} + 0", "14 apples", "20 or 14", "14, 20", "14 14"):
        assert not answers_equal(pred, "14"), pred
    # a list of numbers is not an answer, even if math_verify would pick one of them
    assert not answers_equal("0 1 2 3 4 5 6 7 8 9", "9")


def test_answers_equal_single_latex_values_for_numeric_gold():
    assert answers_equal("\\frac12", "0.5") and answers_equal("-\\dfrac{1}{2}", "-0.5")
    assert answers_equal("\\sqrt{196}", "14") and answers_equal("$\\tfrac{28}{2}$", "14")
    assert not answers_equal("\\frac{1}{3}", "0.5")


def test_answers_equal_bounded_on_hostile_answers():
    for pred in ("9^{9^{9^9}}", "$9^{9^{9^9}}$", "9**9**9**9", "\\Gamma(99999999)",
                 "\\binom{99999999999}{4999999999}", "99999999999^{99999999}", "100000!",
                 "gamma(99999999)", "(" * 5000 + "1" + ")" * 5000, "9^9^9",
                 "9^9^9^9", "99^99^99", "(99^99)^99", "((9^99)^99)^99"):
        assert timed(answers_equal, pred, "3") is False, pred
        assert timed(answers_equal, pred, "x^2") is False, pred


def test_answers_equal_reads_no_superscript_or_circled_digit_as_a_digit():
    """NFKC would turn '2³' into '23' and '①④' into '14'; such answers equal nothing,
    while decimal digits of other scripts still count ('١٤', '１４')."""
    for pred, gold in (("2³", "23"), ("10²", "102"), ("①④", "14"), ("14", "1⁴"),
                       ("x₂", "x2")):
        assert not answers_equal(pred, gold), (pred, gold)
    assert answers_equal("١٤", "14") and answers_equal("１４", "14")
    assert answers_equal("x^2 + 1", "x^2 + 1") and answers_equal("(x+1)^2", "(x+1)^2")


def test_answers_equal_huge_numbers_as_digit_strings():
    big = "7" * 100_000
    assert timed(answers_equal, big, big)
    assert timed(answers_equal, "+000" + big, big)
    assert not timed(answers_equal, big, "7" * 99_999 + "8")
    assert not timed(answers_equal, big, "14")
    assert not timed(answers_equal, "14", big)


def test_answers_equal_int_past_pythons_digit_limit():
    """An int of more digits than str() converts (4,300 by default) is a safe False,
    not a ValueError from the conversion; ints below the limit still compare."""
    huge = 10 ** 5000 - 1
    assert not answers_equal("5", huge) and not answers_equal(huge, "5")
    assert not answers_equal(huge, huge)
    assert answers_equal(10 ** 4000, "1" + "0" * 4000)


def test_answers_equal_nan_none_and_garbage():
    assert not answers_equal("nan", "nan")
    assert not answers_equal(float("nan"), float("nan"))
    assert not answers_equal(None, "14")
    assert not answers_equal("14", None)
    assert not answers_equal("", "")
    assert not answers_equal(["14"], "14")
    assert answers_equal("Paris", "Paris")


def test_answers_equal_one_megabyte_prediction():
    assert not timed(answers_equal, "1 " * (MB // 2), "14")
    assert not timed(answers_equal, "x" * MB, "14")


# ----------------------------------------------------------------------------- tags
def test_think_text():
    assert think_text(O2) == "3 * 4 = 12, 2 + 12 = 14"
    assert think_text("prefix <think>\n a \n</think> b") == "a"
    assert think_text(" 3 * 4 = 12 </think> <answer> 12 </answer>") == "3 * 4 = 12"
    assert think_text("<think> never closed") is None
    assert think_text("<answer> 14 </answer>") is None
    assert think_text(None) is None


def test_is_well_formatted_strict():
    assert is_well_formatted(O2)
    assert is_well_formatted("\n<think>\na\n</think>\n<answer>\n14\n</answer>\n")
    assert is_well_formatted("<think>a</think><answer>14</answer>")
    for bad in (
        "<answer> 14 </answer>",                                    # no think block
        "<think> a </think>",                                       # no answer block
        "hello <think> a </think> <answer> 14 </answer>",           # text before
        "<think> a </think> <answer> 14 </answer> bye",             # text after
        "<think> a </think> text <answer> 14 </answer>",            # text between
        "<answer> 14 </answer> <think> a </think>",                 # wrong order
        "<think> a </think> <answer> 20 </answer><answer>14</answer>",  # injected tags
        "<think> <think> a </think> </think> <answer> 14 </answer>",  # nested
        "<think></think> <answer> 14 </answer>",                    # empty reasoning
        "<think> a </think> <answer>  </answer>",                   # empty answer
        "", None, 42,
    ):
        assert not is_well_formatted(bad), bad


def test_is_well_formatted_soft():
    assert is_well_formatted(O2, strict=False)
    assert is_well_formatted("hi <think> a </think> then <answer> 14 </answer> bye",
                             strict=False)
    assert not is_well_formatted("<answer> 14 </answer> <think> a </think>", strict=False)
    assert not is_well_formatted("<answer> 14 </answer>", strict=False)
    assert not is_well_formatted("<think> a <answer> 14 </answer>", strict=False)
    assert not is_well_formatted(None, strict=False)


@pytest.mark.parametrize("text", [
    "<think>" * 100_000, "</think>" * 100_000, "<answer>" * 100_000,
    "<think>" * 50_000 + "</answer>" * 50_000, "a" * MB, "<" * MB,
])
def test_tag_parsing_is_linear_on_adversarial_input(text):
    timed(is_well_formatted, text, limit=0.5)
    timed(is_well_formatted, text, strict=False, limit=0.5)
    timed(extract_answer, text, limit=0.5)
    timed(extract_answer, text, strict=False, limit=0.5)
    timed(think_text, text, limit=0.5)
    timed(has_cjk, text, limit=0.5)
    timed(has_self_correction, text, limit=0.5)


# ----------------------------------------------------------------------------- scripts
def test_has_cjk_and_script_counts():
    assert has_cjk("所以 the answer") and has_cjk("カタカナ") and has_cjk("한국어")
    assert not has_cjk("plain English 14") and not has_cjk(None) and not has_cjk("")
    assert script_counts("3 * 4 = 12, 所以 the answer is 14") == {
        "latin": 3, "cjk": 2, "other": 0}
    assert script_counts("2 + 3 = 5") == {"latin": 0, "cjk": 0, "other": 0}
    assert script_counts("Привет world") == {"latin": 1, "cjk": 0, "other": 1}
    assert script_counts("3 × 4 ÷ 2") == {"latin": 0, "cjk": 0, "other": 0}
    assert script_counts("<think> café </think>")["latin"] == 1


# ----------------------------------------------------------------------------- degeneration
def test_repeated_ngram_fraction():
    assert repeated_ngram_fraction("a b c a b c", n=3) == pytest.approx(0.25)
    assert repeated_ngram_fraction("A b C a B c", n=3) == pytest.approx(0.25)  # lower-cased
    assert repeated_ngram_fraction("one two three four", n=3) == 0.0
    assert repeated_ngram_fraction("a a", n=3) == 0.0
    assert repeated_ngram_fraction("x " * 1000, n=1) == pytest.approx(1 - 1 / 1000)
    assert repeated_ngram_fraction(None) == 0.0 and repeated_ngram_fraction("") == 0.0
    with pytest.raises(ValueError, match="n-gram size"):
        repeated_ngram_fraction("a b", n=0)


def test_has_self_correction():
    for text in ("Wait, 3 * 4 is 12.", "let me recheck: 2 + 12", "I should double-check",
                 "Let me check the order", "等等，先算乘法", "Aha! multiply first"):
        assert has_self_correction(text), text
    for text in ("await the result", "waiting list", "2 + 12 = 14", "", None, "checked"):
        assert not has_self_correction(text), text
