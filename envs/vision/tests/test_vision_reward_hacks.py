"""A reply built to crash the grader, played through the env's real `step`: it must score the 0 of a wrong
answer, not end the episode in an error the runner would retry or drop."""

from __future__ import annotations

import pytest
from envhub_vision import KINDS
from envhub_vision.tasks import integers

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


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_reply_naming_several_answers_scores_zero_with_a_note(kind: str) -> None:
    """The graders read the last number(s) or the code at the end, so "0 or 1" scored 1.0 on every
    count of 1: a reply committing to several answers is paid as if it had committed to one."""
    env = envhub.make("vision", kind=kind)
    await env.reset(seed=0)
    right = env.task.answer  # type: ignore[attr-defined]
    wrong = (
        "XYW479" if kind == "read-text" else ", ".join(str(n + 1) for n in integers(right.replace(":", " ")))
    )
    if kind == "read-clock":
        wrong = (
            right.replace(":", ":1")
            if len(right.split(":")[1]) == 1
            else f"{int(right.split(':')[0]) % 12 + 1}:00"
        )
    hedge = await env.step(f"{wrong} or {right}")
    assert hedge.reward == 0.0 and "more than one candidate" in hedge.info["reward_notes"]["correct"]
    await env.reset(seed=0)
    committed = await env.step(f"I see it.\nThe answer is {right}")
    assert committed.reward == 1.0 and "reward_notes" not in committed.info
