"""A safe evaluator for arithmetic expressions written by a model (Countdown answers).

The GRPO-Zero code scores a Countdown answer with Python's ``eval`` behind a character
regex. That is a bad habit to copy: ``eval`` runs whatever the model writes, and even
pure arithmetic can hang the trainer (``9**9**9**9`` has about 10^369,000,000 digits) or
crash it (5,000 nested parentheses make CPython's parser raise
``MemoryError``/``RecursionError``). Here the expression is parsed with :mod:`ast` and
walked by our own evaluator, which accepts only a whitelist:

* integer and decimal literals (ASCII digits), ``+ - * /``, unary minus, parentheses;
* ``**`` only when ``allow_pow=True`` — the Countdown task uses ``+ - * /`` only, so it
  is off by default — and then only with an integer exponent ``|e| <= max_exponent``
  whose result is known to fit *before* it is computed;
* no names, calls, attributes, subscripts, comparisons, ``//``, ``%``, strings.

Limits are checked before any work (source length, parenthesis depth), during parsing
(every parser error, including ``RecursionError``/``MemoryError``, becomes an
:class:`ExpressionError`) and during evaluation (AST depth, magnitude of every
intermediate value). Arithmetic is exact (:class:`fractions.Fraction`), so
``(1 + 2) / 3 == 1`` holds without a float tolerance.
"""
from __future__ import annotations

import ast
import math
from fractions import Fraction

__all__ = ["ExpressionError", "safe_eval", "expression_literals", "parse_expression"]

_ALLOWED_CHARS = frozenset("0123456789+-*/(). \t\n")


class ExpressionError(ValueError):
    """The expression is not allowed, malformed, too big, or divides by zero."""


def _check_source(expr: object, max_length: int, max_depth: int,
                  allow_pow: bool) -> str:
    if not isinstance(expr, str):
        raise ExpressionError(
            f"expected the expression as a string, got {type(expr).__name__}")
    if len(expr) > max_length:
        raise ExpressionError(
            f"expression has {len(expr)} characters, more than max_length={max_length}"
        )
    if not expr.strip():
        raise ExpressionError("empty expression")
    bad = sorted(set(expr) - _ALLOWED_CHARS)
    if bad:
        raise ExpressionError(
            f"character(s) {''.join(bad)!r} not allowed: only digits, + - * / ( ) . "
            "and spaces"
        )
    if "**" in expr and not allow_pow:
        raise ExpressionError("'**' is not allowed (pass allow_pow=True to permit it)")
    depth = 0
    for char in expr:  # linear pre-scan: reject deep nesting before the parser sees it
        if char == "(":
            depth += 1
            if depth > max_depth:
                raise ExpressionError(
                    f"parentheses nested deeper than max_depth={max_depth}")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ExpressionError("unbalanced parentheses: ')' without '('")
    if depth:
        raise ExpressionError(f"unbalanced parentheses: {depth} '(' never closed")
    return expr


def parse_expression(expr: str, *, max_length: int = 256, max_depth: int = 100,
                     allow_pow: bool = False) -> ast.Expression:
    """Check the source and parse it with :func:`ast.parse` (``mode="eval"``).

    Raises :class:`ExpressionError` for a disallowed character, a too long or too deeply
    nested source, or any parser failure (``SyntaxError``, ``MemoryError``,
    ``RecursionError``, ...), with the reason in the message.
    """
    source = _check_source(expr, max_length, max_depth, allow_pow)
    try:
        return ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as err:
        raise ExpressionError(
            f"not a valid expression ({type(err).__name__}: {err})") from None


def _literal(node: ast.Constant, max_abs: int) -> Fraction:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExpressionError(f"only numbers are allowed, found {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError(f"number literal is not finite: {value!r}")
    result = Fraction(value) if isinstance(value, int) else Fraction(repr(value))
    return _bounded(result, max_abs)


def _bounded(value: Fraction, max_abs: int) -> Fraction:
    if abs(value) > max_abs or value.denominator > max_abs:
        raise ExpressionError(f"intermediate value exceeds max_abs={max_abs}")
    return value


def _power(base: Fraction, exponent: Fraction, max_abs: int,
           max_exponent: int) -> Fraction:
    if exponent.denominator != 1:
        raise ExpressionError(f"exponent must be an integer, got {exponent}")
    e = int(exponent)
    if abs(e) > max_exponent:
        raise ExpressionError(f"exponent {e} exceeds max_exponent={max_exponent}")
    if base == 0 and e < 0:
        raise ExpressionError("division by zero (0 raised to a negative power)")
    # |p/q|^e has at most e * max(bits(p), bits(q)) bits: check before computing.
    bits = max(abs(base.numerator).bit_length(), base.denominator.bit_length())
    if abs(e) * bits > max_abs.bit_length() + 1:
        raise ExpressionError(f"power would exceed max_abs={max_abs}")
    return _bounded(base ** e, max_abs)


def _evaluate(node: ast.AST, depth: int, limits: dict) -> Fraction:
    if depth > limits["max_depth"]:
        raise ExpressionError(
            f"expression nested deeper than max_depth={limits['max_depth']}")
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, depth + 1, limits)
    if isinstance(node, ast.Constant):
        return _literal(node, limits["max_abs"])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, depth + 1, limits)
    if isinstance(node, ast.UnaryOp):
        raise ExpressionError(f"unary operator {type(node.op).__name__} is not allowed "
                              "(only unary minus)")
    if isinstance(node, ast.BinOp):
        left = _evaluate(node.left, depth + 1, limits)
        right = _evaluate(node.right, depth + 1, limits)
        op, max_abs = node.op, limits["max_abs"]
        if isinstance(op, ast.Add):
            return _bounded(left + right, max_abs)
        if isinstance(op, ast.Sub):
            return _bounded(left - right, max_abs)
        if isinstance(op, ast.Mult):
            return _bounded(left * right, max_abs)
        if isinstance(op, ast.Div):
            if right == 0:
                raise ExpressionError("division by zero")
            return _bounded(left / right, max_abs)
        if isinstance(op, ast.Pow) and limits["allow_pow"]:
            return _power(left, right, max_abs, limits["max_exponent"])
        raise ExpressionError(f"operator {type(op).__name__} is not allowed")
    raise ExpressionError(
        f"{type(node).__name__} is not allowed: only numbers, + - * /, unary minus "
        "and parentheses"
    )


def safe_eval(expr: str, *, max_length: int = 256, max_depth: int = 100,
              max_abs: int = 10**12, allow_pow: bool = False,
              max_exponent: int = 16) -> Fraction:
    r"""Evaluate an arithmetic expression exactly, or raise :class:`ExpressionError`.

    Grammar: :math:`E ::= n \mid -E \mid E \circ E \mid (E)` with
    :math:`\circ \in \{+, -, \times, /\}` (and ``**`` if ``allow_pow``). Every
    intermediate value :math:`v` must satisfy :math:`|v| \le` ``max_abs`` with a
    denominator :math:`\le` ``max_abs``.

    >>> safe_eval("(1 + 2) / 3")
    Fraction(1, 1)
    >>> safe_eval("83 - 45 - 43 + 38")
    Fraction(33, 1)

    ``safe_eval("9**9**9**9")`` fails at once (``**`` not allowed, or with
    ``allow_pow=True`` the inner exponent 387,420,489 exceeds ``max_exponent``);
    ``"(" * 5000 + "1" + ")" * 5000`` fails on its length before it is parsed.
    """
    tree = parse_expression(expr, max_length=max_length, max_depth=max_depth,
                            allow_pow=allow_pow)
    limits = {"max_depth": max_depth, "max_abs": max_abs, "allow_pow": allow_pow,
              "max_exponent": max_exponent}
    return _evaluate(tree, 0, limits)


def expression_literals(expr: str, *, max_length: int = 256, max_depth: int = 100,
                        allow_pow: bool = False) -> list[Fraction]:
    """The number literals of the expression by column (``"-3 + 45"`` -> [3, 45]).

    Countdown checks with this that each given number is used exactly once. Raises
    :class:`ExpressionError` like :func:`safe_eval` if the source is not allowed.
    """
    tree = parse_expression(expr, max_length=max_length, max_depth=max_depth,
                            allow_pow=allow_pow)
    literals = [node for node in ast.walk(tree) if isinstance(node, ast.Constant)]
    literals.sort(key=lambda node: node.col_offset)
    return [_literal(node, 10**300) for node in literals]
