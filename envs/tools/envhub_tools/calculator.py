"""A calculator the agent can call: exact arithmetic over a parsed expression, never `eval`.

The expression is parsed with `ast` and only numbers, + - * / // % **, unary signs, parentheses and a
few named functions are walked; anything else (names, attributes, calls to other functions, strings)
is refused, so `__import__('os')` is an error message, not code. Values are exact fractions, so
`0.1 + 0.2` is `0.3` and an integer result prints as an integer.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from fractions import Fraction

MAX_LENGTH = 1_000
"""Characters in one expression: enough for summing a few hundred numbers."""
MAX_BITS = 4_096
"""Size of any intermediate numerator or denominator: stops `9 ** 9 ** 9` before it eats the host."""

_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: operator.mod,
}


class CalculatorError(ValueError):
    """The expression is not one the calculator evaluates; the message says why, for the agent."""


def _sqrt(x: Fraction) -> Fraction:
    if x < 0:
        raise CalculatorError("sqrt of a negative number")
    root_n, root_d = math.isqrt(x.numerator), math.isqrt(x.denominator)
    if root_n * root_n == x.numerator and root_d * root_d == x.denominator:
        return Fraction(root_n, root_d)
    return Fraction(math.sqrt(x))


def _round(x: Fraction, digits: Fraction = Fraction(0)) -> Fraction:
    """Halves round away from zero, as on a pocket calculator (Python's `round` goes to even)."""
    if digits.denominator != 1 or not 0 <= digits <= 20:
        raise CalculatorError("round's digits must be a whole number from 0 to 20")
    scale = 10 ** int(digits)
    magnitude = Fraction(math.floor(abs(x) * scale + Fraction(1, 2)), scale)
    return -magnitude if x < 0 else magnitude


_FUNCTIONS: dict[str, Callable[..., Fraction]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "round": _round,
    "sqrt": _sqrt,
}


def _checked(value: Fraction) -> Fraction:
    if max(abs(value.numerator).bit_length(), value.denominator.bit_length()) > MAX_BITS:
        raise CalculatorError("the result is too large")
    return value


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator == 1:
        bits = max(abs(base.numerator).bit_length(), base.denominator.bit_length())
        if bits * abs(exponent) > MAX_BITS:
            raise CalculatorError("the result is too large")
        if base == 0 and exponent < 0:
            raise CalculatorError("division by zero")
        return Fraction(base ** int(exponent))
    if base < 0:
        raise CalculatorError("a fractional power of a negative number is not a real number")
    try:
        return Fraction(float(base) ** float(exponent))
    except OverflowError as exc:
        raise CalculatorError("the result is too large") from exc


def _value(node: ast.expr) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.Constant) and type(node.value) is float:
        return Fraction(repr(node.value))  # from its decimal spelling, so 0.1 is exactly one tenth
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _value(node.operand)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow):
            return _checked(_power(left, right))
        op = _BINARY.get(type(node.op))
        if op is None:
            raise CalculatorError(f"operator {type(node.op).__name__} is not supported; use + - * / // % **")
        if right == 0 and isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod):
            raise CalculatorError("division by zero")
        return _checked(op(left, right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _FUNCTIONS.get(node.func.id)
        if function is not None and node.args:
            try:
                return _checked(function(*(_value(arg) for arg in node.args)))
            except TypeError as exc:
                raise CalculatorError(f"{node.func.id}: wrong number of arguments") from exc
    allowed = ", ".join(_FUNCTIONS)
    raise CalculatorError(
        f"{ast.unparse(node)!r} is not allowed: use numbers, + - * / // % **, parentheses and {allowed}"
    )


def evaluate(expression: str) -> Fraction:
    """The exact value of an arithmetic expression, or CalculatorError saying what is wrong with it."""
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(f"the expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip().replace("^", "**"), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression: {exc.msg}") from exc
    return _value(tree.body)


def format_number(value: Fraction) -> str:
    """An integer as digits; anything else as a decimal with up to 12 significant digits."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.12g}"
