"""Reading the number out of a free-text answer, shared by the games' reward methods."""

from __future__ import annotations

import re
import sys

_INTEGER = re.compile(r"-?\d[\d,]*")


def to_int(digits: str) -> int:
    """`digits` as an int; a number longer than CPython converts (`int()` raises past 4300 digits, and
    the reply decides how long it is) stands as ±10**limit, a value no task's answer is near, so it is
    graded as wrong, and compared as huge, instead of crashing the reward."""
    try:
        return int(digits)
    except ValueError:
        huge: int = 10 ** (sys.get_int_max_str_digits() or 4300)
        return -huge if digits.startswith("-") else huge


def last_integer(text: str) -> int | None:
    """The last integer written in `text` ("The answer is 1,234." -> 1234), or None."""
    found = _INTEGER.findall(text)
    if not found:
        return None
    return to_int(found[-1].replace(",", ""))
