"""Reading the number out of a free-text answer, shared by the games' reward methods: envhub's bounded
reader (`envhub.grading.numbers`), with thousands commas, integers only, and CPython's own digit limit."""

from __future__ import annotations

from envhub.grading import numbers


def last_integer(text: str) -> int | None:
    """The last integer written in `text` ("The answer is 1,234." -> 1234), or None; one longer than
    CPython converts stands as ±10**4300, graded as wrong and compared as huge."""
    return numbers.last_integer(text)
