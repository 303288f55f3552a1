"""The one bounded reader of numbers in a reply: the written forms each family reads, and the bound that
keeps a reply from crashing or stalling the grader (CPython's int() raises past 4300 digits)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from envhub.grading import numbers


def test_each_written_form_reads_as_its_family_wrote_it() -> None:
    text = "first 12, then -1,234.50 and 7"
    assert numbers.integers(text) == [12, -1234, 50, 7]
    assert numbers.integers(text, grouping=False) == [12, -1, 234, 50, 7]
    assert numbers.number_texts(text) == ["12", "-1234.50", "7"]
    assert numbers.last_integer("first 12 then -1,234.") == -1234
    assert numbers.last_number("The total is 1,234.50.") == Fraction(2469, 2)
    assert numbers.last_integer("none") is None
    assert numbers.last_number("none") is None


@pytest.mark.parametrize("sign", ["", "-"])
def test_a_number_past_the_bound_stands_as_huge_instead_of_raising(sign: str) -> None:
    long = sign + "7" * 5000
    huge = 10**numbers.MAX_DIGITS
    assert numbers.last_integer(f"the answer is {long}") == (-huge if sign else huge)
    assert numbers.last_number(f"the answer is {long}.5") == (-huge if sign else huge)
    assert numbers.integers(f"{long} 3", grouping=False, max_digits=18) == [-(10**18) if sign else 10**18, 3]


def test_the_bound_counts_digits_not_signs_or_the_point() -> None:
    assert numbers.integer("-" + "9" * 18, max_digits=18) == -int("9" * 18)
    assert numbers.value("9" * 17 + ".9", max_digits=18) == Fraction("9" * 17 + ".9")
    assert numbers.integer("1" + "0" * 18, max_digits=18) == 10**18


def test_decimals_without_grouping_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="decimals without grouping"):
        numbers.number_texts("1.5", grouping=False)
