"""A reply built to crash the grader, played through the env's real `step`: it must score the 0 of a wrong
answer, not end the episode in an error the runner would retry or drop."""

from __future__ import annotations

import pytest
from envhub_vision import KINDS

import envhub

CASES = [(kind, 5000) for kind in KINDS if kind != "read-text"] + [("locate-object", 400)]
"""5000 digits: more than CPython's int() converts (4300), it raised ValueError in every numeric grader;
400 digits: math.dist raised OverflowError in locate-object's."""


@pytest.mark.parametrize(("kind", "digits"), CASES)
async def test_a_number_too_long_to_convert_scores_zero(kind: str, digits: int) -> None:
    env = envhub.make("vision", kind=kind)
    await env.reset(seed=0)
    result = await env.step(f"1, {'9' * digits}")
    assert result.terminated and result.reward == 0.0
