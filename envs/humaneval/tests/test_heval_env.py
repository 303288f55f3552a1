"""`humaneval-v0` on arrival: seeded resets, the canonical solution at 1.0, wrong or empty answers at 0,
the random baseline at 0, and an episode through the Parquet store."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from envhub_humaneval import humaneval_tasks

import envhub
from envhub.policies import OraclePolicy, RandomPolicy
from envhub.rollout import rollout, run_episode
from envhub.store import read_episodes

SPECIAL = [32, 33, 38, 50, 53]
"""The problems whose tests are rewritten; always in the sample."""
SAMPLE = sorted(set(SPECIAL) | set(random.Random(17).sample(range(164), 7)))
"""`benchmarks/heval_sweep.py` plays all 164; the default suite plays these."""


@pytest.mark.parametrize("index", SAMPLE)
async def test_the_canonical_solution_scores_one(index: int) -> None:
    episode = await run_episode(envhub.make("humaneval-v0", task=index), OraclePolicy(), seed=0)
    assert episode.reward == 1.0, episode.reward_components
    assert episode.reward_components["grade_valid"] == 1.0


async def test_the_same_seed_draws_the_same_problem_and_seeds_vary() -> None:
    env = envhub.make("humaneval-v0")
    firsts = []
    for seed in (3, 3, 4, 5, 6):
        observation, _ = await env.reset(seed=seed)
        firsts.append(observation[-1].text)
    assert firsts[0] == firsts[1]
    assert len(set(firsts[1:])) > 1


async def test_seed_s_plays_problem_s_so_164_seeds_cover_the_benchmark() -> None:
    env = envhub.make("humaneval-v0")
    played = []
    for seed in (0, 17, 163, 164):
        await env.reset(seed=seed)
        played.append(env.task.id)  # type: ignore[attr-defined]
    assert played == ["HumanEval/0", "HumanEval/17", "HumanEval/163", "HumanEval/0"]


async def test_a_task_is_chosen_by_id_or_index_and_a_bad_index_is_refused() -> None:
    by_index = envhub.make("humaneval-v0", task=53)
    by_id = envhub.make("humaneval-v0", task="HumanEval/53")
    for env in (by_index, by_id):
        observation, _ = await env.reset(seed=0)
        assert "def add(x: int, y: int)" in observation[-1].text
    with pytest.raises(ValueError, match="indices run from 0 to 163"):
        envhub.make("humaneval-v0", task=164)


@pytest.mark.parametrize(
    ("reply", "reward"),
    [
        ("", 0.0),
        ("I cannot solve this.", 0.0),
        ("```python\ndef add(x: int, y: int):\n    return x - y\n```", 0.0),
        ("```python\ndef add(x: int, y: int):\n    return x + y\n```", 1.0),
        ("    return x + y\n", 1.0),  # HumanEval's own completion format: the body only
    ],
)
async def test_wrong_or_empty_answers_score_zero_and_any_complete_form_scores_one(
    reply: str, reward: float
) -> None:
    env = envhub.make("humaneval-v0", task=53)
    await env.reset(seed=0)
    result = await env.step(reply)
    assert result.terminated or result.truncated  # an empty message is malformed: the one turn is used
    assert result.reward == reward


async def test_the_random_baseline_scores_zero() -> None:
    env = envhub.make("humaneval-v0")
    rewards = [(await run_episode(env, RandomPolicy(seed=s), seed=s)).reward for s in range(3)]
    assert rewards == [0.0, 0.0, 0.0]


async def test_an_episode_round_trips_through_the_parquet_store(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    result = await rollout("humaneval-v0", OraclePolicy(), episodes=2, seed=0, out=out)
    stored = read_episodes(out)
    assert [e.reward for e in stored] == [1.0, 1.0]
    assert [e.messages for e in stored] == [e.messages for e in result.episodes]
    assert {e.env_id for e in stored} == {"humaneval-v0"}
    assert len(humaneval_tasks()) == 164
