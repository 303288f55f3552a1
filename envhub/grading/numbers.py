"""Reading numbers out of a free-text reply, bounded: the one reader every answer-graded family uses.

The reply decides how long a number is, and an unbounded read is an attack on the grader: CPython's
`int()` raises past 4300 digits (crashing the reward), and arithmetic on huge values (`math.dist`) can
overflow or stall. So a number of more than `max_digits` digits is never converted: it stands as
±10**max_digits, a value no answer is near, so it grades as wrong and compares as huge. The bound
and the written form (thousands commas, decimals) are each family's choice; the reading is shared.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_DIGITS = 4300
"""The default bound: CPython's own `int()` limit, past which it raises (no answer here is near)."""
_GROUPED = re.compile(r"-?\d[\d,]*")
_GROUPED_DECIMAL = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_PLAIN = re.compile(r"-?\d+")


def number_texts(text: str, *, grouping: bool = True, decimals: bool = True) -> list[str]:
    """The numbers written in `text`, in order, as their digits (thousands commas dropped).

    `grouping`: commas inside a number group its digits (`1,234` is one number), else they separate
    numbers (`1,234` is 1 and 234). `decimals`: `1.5` is one number, else two (`1` and `5`)."""
    if decimals and not grouping:
        raise ValueError("decimals without grouping is not a written form any family reads")
    pattern = (_GROUPED_DECIMAL if decimals else _GROUPED) if grouping else _PLAIN
    return [raw.replace(",", "") for raw in pattern.findall(text)]


def _digit_count(digits: str) -> int:
    return len(digits) - digits.startswith("-") - ("." in digits)


def value(digits: str, max_digits: int = MAX_DIGITS) -> Fraction:
    """`digits` (as `number_texts` gives them) as a value; past `max_digits` digits, ±10**max_digits."""
    if _digit_count(digits) > max_digits:
        huge = Fraction(10**max_digits)
        return -huge if digits.startswith("-") else huge
    return Fraction(digits)


def integer(digits: str, max_digits: int = MAX_DIGITS) -> int:
    """`digits` of an integer as an int; past `max_digits` digits, ±10**max_digits."""
    if _digit_count(digits) > max_digits:
        huge: int = 10**max_digits
        return -huge if digits.startswith("-") else huge
    return int(digits)


def integers(text: str, *, grouping: bool = True, max_digits: int = MAX_DIGITS) -> list[int]:
    """Every integer written in `text`, in order, each bounded by `max_digits`."""
    return [integer(d, max_digits) for d in number_texts(text, grouping=grouping, decimals=False)]


def last_integer(text: str, *, grouping: bool = True, max_digits: int = MAX_DIGITS) -> int | None:
    """The last integer written in `text` ("The answer is 1,234." -> 1234), or None; only that one is
    converted."""
    found = number_texts(text, grouping=grouping, decimals=False)
    return integer(found[-1], max_digits) if found else None


def last_number(text: str, *, max_digits: int = MAX_DIGITS) -> Fraction | None:
    """The last number written in `text`, decimals included ("The total is 1,234.50." -> 2469/2), or
    None; only that one is converted."""
    found = number_texts(text)
    return value(found[-1], max_digits) if found else None
