"""Replies that hedge or game Reasoning Gym's scorers, played through the env's real `step`.

Each must score what an honest grader gives a wrong answer (0), while the reference answer keeps 1.0
(test_rgym_datasets plays it on every dataset).
"""

from __future__ import annotations

from typing import Any

import pytest
from envhub_reasoning_gym import env_id
from envhub_reasoning_gym.env import generate, reference_answer

import envhub

HEDGED = [
    "gcd",
    "isomorphic_strings",
    "syllogism",
    "ransom_note",
    "basic_arithmetic",
    "caesar_cipher",
    "mahjong_puzzle",
    "course_schedule",
    "tsumego",
    "codeio",
    "manipulate_matrix",
]
"""Datasets whose scorer gave a reply that contains the answer len(answer)/len(reply): Reasoning Gym's
default score_answer and the custom ones that copy its containment credit."""


async def played(name: str, seed: int) -> tuple[envhub.Env, str, str]:
    """The env reset to `seed`, the item's answer and another item's different answer."""
    env = envhub.make(env_id(name))
    await env.reset(seed=seed)
    entry: dict[str, Any] = env.entry  # type: ignore[attr-defined]
    right = reference_answer(entry)
    assert right is not None
    for index in range(1, 50):
        other = reference_answer(generate(env.dataset, name, (seed + index) % env.dataset.size))  # type: ignore[attr-defined]
        if other is not None and other.strip() != right.strip():
            return env, right, other
    raise AssertionError(f"{name}: no other answer in 50 items")


@pytest.mark.parametrize("name", HEDGED)
@pytest.mark.parametrize("form", ["{wrong} or {right}", "{right}\n{wrong}", "{right} {right}", "{right}."])
async def test_a_reply_holding_the_answer_among_other_text_scores_zero(name: str, form: str) -> None:
    """'True False' was a sure 0.4-0.5 on every yes/no item, a list of candidates a share of 1."""
    for seed in range(2):
        env, right, wrong = await played(name, seed)
        result = await env.step(f"<answer>{form.format(right=right, wrong=wrong)}</answer>")
        assert result.terminated and result.reward == 0.0, (seed, result.info["reward_components"])
        if seed == 0:  # every dataset here paid this item's hedges before (codeio's seed 1 does not)
            assert "holds the answer among other text" in result.info["reward_notes"]["score"]


async def test_game_of_life_halting_needs_the_right_truth_value() -> None:
    """Its scorer compared bool(reply) with bool("False"): any non-empty reply scored 1.0."""
    for seed in range(4):
        env, right, _ = await played("game_of_life_halting", seed)
        wrong = "False" if right == "True" else "True"
        for reply, expected in [("banana", 0.0), (wrong, 0.0), (right.lower(), 1.0), (f" {right} ", 1.0)]:
            await env.reset(seed=seed)
            result = await env.step(f"<answer>{reply}</answer>")
            assert result.reward == expected, (seed, reply)
