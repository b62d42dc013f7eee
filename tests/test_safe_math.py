"""Tests for grpo_lib.safe_math: the whitelist, the limits, and no eval()."""
import inspect
import time
from fractions import Fraction

import pytest

from grpo_lib import safe_math
from grpo_lib.safe_math import ExpressionError, expression_literals, safe_eval


def fails_fast(expr, match, limit=1.0, **kwargs):
    start = time.perf_counter()
    with pytest.raises(ExpressionError, match=match):
        safe_eval(expr, **kwargs)
    assert time.perf_counter() - start < limit


@pytest.mark.parametrize("expr, value", [
    ("1 + 2", 3), ("(1 + 2) / 3", 1), ("83-45-43+38", 33), ("2 + 3 * 4", 14),
    ("(2 + 3) * 4", 20), ("-3 + 5", 2), ("--3", 3), ("7 / 2", Fraction(7, 2)),
    ("1.5 * 2", 3), ("0.1 + 0.2", Fraction(3, 10)), ("((((1))))", 1), (" 6 / 4 ", Fraction(3, 2)),
])
def test_safe_eval_values(expr, value):
    result = safe_eval(expr)
    assert isinstance(result, Fraction) and result == value


def test_exact_arithmetic_has_no_float_error():
    assert safe_eval("0.1 + 0.2") == safe_eval("0.3")       # floats: 0.30000000000000004
    assert safe_eval("1 / 3 * 3") == 1


@pytest.mark.parametrize("expr, match", [
    ("x + 1", "not allowed"), ("__import__('os').system('ls')", "not allowed"),
    ("abs(-3)", "not allowed"), ("2(3)", "Call is not allowed"),
    ("(1).real", "not allowed"), ("7 // 2", "FloorDiv"), ("7 % 2", "not allowed"),
    ("1 < 2", "not allowed"), ("+3", "UAdd"), ("1 2", "not a valid expression"),
    ("(1 + 2", "never closed"), ("1 + 2)", "unbalanced"), ("", "empty"), ("   ", "empty"),
    ("1e999", "not allowed"), ("١٤ + 1", "not allowed"), ("1_000 + 1", "not allowed"),
])
def test_rejects_outside_the_whitelist(expr, match):
    fails_fast(expr, match)


def test_rejects_non_strings():
    for bad in (None, 14, b"1+2", ["1+2"]):
        with pytest.raises(ExpressionError, match="as a string"):
            safe_eval(bad)


def test_division_by_zero():
    fails_fast("1 / 0", "division by zero")
    fails_fast("5 / (3 - 3)", "division by zero")
    fails_fast("0 ** -1", "division by zero", allow_pow=True)


def test_power_tower_fails_fast():
    fails_fast("9**9**9**9", r"'\*\*' is not allowed")
    fails_fast("9**9**9**9", "exceeds max_exponent", allow_pow=True)
    fails_fast("2**64", "exceeds max_exponent", allow_pow=True)
    fails_fast("(10**6)**10", "exceed max_abs", allow_pow=True)
    fails_fast("2 ** 0.5", "integer", allow_pow=True)
    assert safe_eval("2**10", allow_pow=True) == 1024
    assert safe_eval("(1/2)**-3", allow_pow=True) == 8


def test_deep_nesting_fails_fast_without_crashing():
    fails_fast("(" * 5000 + "1" + ")" * 5000, "max_length")
    fails_fast("(" * 5000 + "1" + ")" * 5000, "max_depth", max_length=20_000)
    fails_fast("-" * 100_000 + "1", "max_length")
    # CPython's own parser raises MemoryError here; it must come back as ExpressionError.
    fails_fast("-" * 100_000 + "1", "not a valid expression|max_depth", max_length=200_000)
    fails_fast("1+" * 150 + "1", "max_depth", max_length=1000)


def test_magnitude_and_length_limits():
    big = "9" * 100_000
    fails_fast(big, "max_length")
    fails_fast("999999 * 999999 * 999999", "max_abs")
    fails_fast("1 / 999999 / 999999 / 999999", "max_abs")
    assert safe_eval("999999 * 999999 * 999999", max_abs=10**20) == 999999**3


def test_expression_literals_in_source_order():
    assert expression_literals("-3 + 45 * (2 - 1)") == [3, 45, 2, 1]
    assert expression_literals("83-45-43+38") == [83, 45, 43, 38]
    assert expression_literals("1.5 + 2") == [Fraction(3, 2), 2]
    with pytest.raises(ExpressionError):
        expression_literals("x + 1")


def test_module_never_calls_eval():
    source = inspect.getsource(safe_math)
    assert "eval(" not in source.replace("safe_eval(", "").replace("_evaluate(", "")
