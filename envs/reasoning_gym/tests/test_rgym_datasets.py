"""Every Reasoning Gym dataset is an id, and its reference answer, played by the oracle, scores 1.0 on it.

The sweep plays a few seeds of every dataset with default options; benchmarks/rgym_arrival.py plays more
and prints the oracle and random figures per dataset.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
from envhub_reasoning_gym import dataset_names, env_id, solvers
from envhub_reasoning_gym.env import EXAMPLE_ANSWER_KEYS

import envhub
from envhub.policies import OraclePolicy, RandomPolicy
from envhub.rollout import run_batch

PACKAGE = Path(__file__).resolve().parent.parent
SEEDS = 3
SOLVED_BY_ENVHUB = {"boxnet", "rush_hour"}
"""Datasets whose items keep neither an `answer` nor an example solution: the oracle plays envhub's solver."""
COMPOSITE: dict[str, object] = {
    "datasets": [
        {"name": "chain_sum", "weight": 1, "config": {}},
        {"name": "graph_color", "weight": 1, "config": {}},
    ]
}


def kwargs(name: str) -> dict[str, object]:
    """Default options; the composite dataset has no default mixture, so it gets one."""
    return COMPOSITE if name == "composite" else {}


def test_entry_points_are_the_installed_datasets() -> None:
    dist = importlib.metadata.distribution("envhub-reasoning-gym")
    points = {ep.name: ep.value for ep in dist.entry_points if ep.group == "envhub.envs"}
    assert points == {env_id(n): f"envhub_reasoning_gym.datasets:{n}" for n in dataset_names()}
    assert len(points) >= 100


def test_pyproject_is_what_the_generator_writes() -> None:
    script = PACKAGE / "tools" / "generate_entry_points.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", dataset_names())
async def test_the_reference_answer_scores_one(name: str) -> None:
    episodes = (
        await run_batch(env_id(name), OraclePolicy(), episodes=SEEDS, seed=0, env_kwargs=kwargs(name))
    ).episodes
    for episode in episodes:
        assert episode.error is None, episode.error
        assert episode.terminated
        assert episode.reward == 1.0, (episode.seed, episode.messages[-1].text, episode.reward_components)


@pytest.mark.parametrize("name", sorted(SOLVED_BY_ENVHUB))
async def test_datasets_without_a_reference_are_played_by_envhubs_solver(name: str) -> None:
    """If a later reasoning-gym gives these items an answer, this fails: the solver can go."""
    env = envhub.make(env_id(name))
    await env.reset(seed=0)
    assert env.entry["answer"] is None  # type: ignore[attr-defined]
    assert env.reference_action([]) == f"<answer>{solvers.solve(name, env.entry['metadata'])}</answer>"  # type: ignore[attr-defined]
    others = [n for n in dataset_names() if n not in SOLVED_BY_ENVHUB and n != "composite"]
    for other in others[:: len(others) // 8]:
        made = envhub.make(env_id(other))
        await made.reset(seed=0)
        assert made.entry["answer"] is not None or other in EXAMPLE_ANSWER_KEYS  # type: ignore[attr-defined]


async def test_the_random_baseline_stays_far_below_the_oracle() -> None:
    """Random text has no <answer> block; Reasoning Gym scores that None, 0 or a token 0.01."""
    for name in dataset_names():
        batch = await run_batch(
            env_id(name), RandomPolicy(seed=0), episodes=2, seed=0, env_kwargs=kwargs(name)
        )
        for episode in batch.episodes:
            assert episode.error is None, (name, episode.error)
            assert episode.reward <= 0.01, (name, episode.reward_components)
