"""Stalling, played through the env's real `step`: a reply that names no action must never pay better than
acting, or a policy learns to say nothing in every game whose steps cost reward."""

from __future__ import annotations

import pytest

import envhub
from envhub.policies import OraclePolicy
from envhub.rollout import run_batch


async def stalled_return(env_id: str, seed: int | None) -> float:
    env = envhub.make(env_id)
    await env.reset(seed=seed)
    total = 0.0
    while True:
        result = await env.step("hmm, let me think")
        total += result.reward
        if result.terminated or result.truncated:
            return total


@pytest.mark.parametrize("env_id", ["gym/CliffWalking-v1", "gym/Taxi-v4"])
async def test_saying_nothing_until_the_turns_run_out_pays_less_than_the_oracle(env_id: str) -> None:
    """CliffWalking's best return is -13 and Taxi's is positive; a reply without an action cost a turn
    and no step, so 100 (200) such replies returned 0, above CliffWalking's optimum."""
    oracle = (await run_batch(env_id, OraclePolicy(), episodes=3, seed=0)).episodes
    for episode in oracle:
        stalled = await stalled_return(env_id, episode.seed)
        assert stalled < episode.reward, (episode.seed, stalled, episode.reward)
        assert stalled < 0


async def test_a_number_too_long_to_convert_is_no_action_not_a_crash() -> None:
    """5000 digits: `int()` raises past CPython's 4300-digit limit, and the action reader ended the
    episode in an error the runner would retry or drop; it is a reply that names no action."""
    env = envhub.make("gym/Taxi-v4")
    try:
        await env.reset(seed=0)
        result = await env.step("7" * 5000)
        assert "No action found in your reply" in str(result.observation)
    finally:
        await env.close()
