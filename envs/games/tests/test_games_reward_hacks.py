"""Replies built to break the grader, played through each game's real `step`: each must score what an honest
grader gives a wrong answer (0), never end the episode in an error the runner would retry or drop."""

from __future__ import annotations

import pytest

import envhub

HUGE = "1" * 5000
"""Longer than CPython converts (4300 digits): `int()` raised ValueError inside the reward before."""


async def first_step(env_id: str, reply: str) -> envhub.StepResult:
    env = envhub.make(env_id)
    await env.reset(seed=0)
    return await env.step(reply)


@pytest.mark.parametrize(
    ("env_id", "reply"),
    [
        ("arithmetic-v0", f"The result is {HUGE}"),
        ("countdown-v0", " + ".join(["1"] * 5000)),  # RecursionError in ast construction
        ("countdown-v0", "-" * 5000 + "1"),
    ],
)
async def test_a_reply_that_crashed_the_grader_scores_zero(env_id: str, reply: str) -> None:
    result = await first_step(env_id, reply)
    assert result.terminated and result.reward == 0.0


async def test_a_guess_too_long_to_convert_is_answered_lower_and_counted() -> None:
    """guess-number reads each guess in `respond`; a 5000-digit guess is above any secret."""
    result = await first_step("guess-number-v0", HUGE)
    assert result.observation[-1].text == "lower" and not result.terminated


async def test_a_reply_naming_several_answers_scores_zero_with_a_note() -> None:
    """arithmetic reads the last integer: "X or Y" scored 1.0 whenever Y was the result."""
    async with envhub.make("arithmetic", steps=2) as env:
        await env.reset(seed=0)
        result = env.result  # type: ignore[attr-defined]
        hedge = await env.step(f"{result + 1} or {result}")
        assert hedge.reward == 0.0 and "more than one candidate" in hedge.info["reward_notes"]["exact"]
        await env.reset(seed=0)
        committed = await env.step(f"The result is {result}.")
        assert committed.reward == 1.0


async def test_numbers_the_tools_gave_are_not_candidates() -> None:
    """Working that repeats the calculator's results is not a hedge: only new numbers are candidates."""
    async with envhub.make("arithmetic", steps=2) as env:
        await env.reset(seed=0)
        result = None
        for _ in range(3):
            action = env.reference_action(env.messages)  # type: ignore[attr-defined]
            assert action is not None
            if isinstance(action, str):
                tools = [m.text for m in env.messages if m.role == "tool"]  # type: ignore[attr-defined]
                result = await env.step(f"{tools[0]}, then {action}")
                break
            await env.step(action)
        assert result is not None and result.reward == 1.0
