"""Gymnasium's text games as envhub envs: ids from gymnasium's own list, seeded resets, actions read from
replies, the env's reward summed, the reference policy, `gym:<id>` for a user's env, and the store."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from envhub_gym_text import UnsupportedGymEnv, factory_for, plain_text, toy_text_ids
from gymnasium import spaces

import envhub
import envhub.registration
from envhub.policies import OraclePolicy, RandomPolicy
from envhub.rollout import rollout, run_batch
from envhub.store import read_episodes

IDS = [f"gym/{gym_id}" for gym_id in toy_text_ids()]


class Counter(gymnasium.Env[Any, Any]):
    """A user's own env: count up to 3 (action 1 adds one, action 0 does nothing); no render at all."""

    metadata = {"render_modes": []}  # noqa: RUF012

    def __init__(self, **kwargs: Any) -> None:
        self.observation_space = spaces.Discrete(4)
        self.action_space = spaces.Discrete(2)
        self.count = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        self.count = 0
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        self.count += int(action)
        return self.count, float(action), self.count == 3, False, {}


gymnasium.register("EnvhubTestCounter-v0", entry_point=Counter, max_episode_steps=10)


def test_the_entry_points_are_gymnasiums_toy_text_list() -> None:
    declared = {
        ep.name: ep.value for ep in metadata.entry_points(group="envhub.envs") if ep.name.startswith("gym/")
    }
    assert sorted(declared) == IDS
    assert {"gym/FrozenLake-v1", "gym/Blackjack-v1", "gym/CliffWalking-v1"} <= set(IDS)
    assert any(i.startswith("gym/Taxi-") for i in IDS)
    assert all(
        callable(getattr(__import__("envhub_gym_text.toy_text", fromlist=["x"]), v.split(":")[1]))
        for v in declared.values()
    )


@pytest.mark.parametrize("env_id", IDS)
async def test_same_seed_same_first_observation(env_id: str) -> None:
    env = envhub.make(env_id)
    first = [(await env.reset(seed=seed))[0][-1].text for seed in (5, 5)]
    assert first[0] == first[1]
    assert "Actions: 0 = " in first[0]


@pytest.mark.parametrize("env_id", ["gym/Taxi-v4", "gym/Blackjack-v1"])
async def test_seeds_vary_the_start(env_id: str) -> None:
    env = envhub.make(env_id)
    firsts = {(await env.reset(seed=seed))[0][-1].text for seed in range(8)}
    assert len(firsts) > 1


async def test_actions_are_read_by_name_or_number_and_a_reply_without_one_plays_the_default() -> None:
    env = envhub.make("gym/FrozenLake-v1", is_slippery=False)
    await env.reset(seed=0)
    assert env.parse_action("I will go RIGHT") == 2  # type: ignore[attr-defined]
    assert env.parse_action("not left but down") == 1  # type: ignore[attr-defined]
    assert env.parse_action("Action: 3") == 3  # type: ignore[attr-defined]
    assert env.parse_action("7") is None  # type: ignore[attr-defined]
    assert env.parse_action("upward-left") is None  # type: ignore[attr-defined]
    nothing = await env.step("hmm")
    assert "No action found in your reply, so the default action left" in nothing.observation[0].text
    assert env.env_steps == 1 and env.turn == 1  # type: ignore[attr-defined]
    assert env.invalid_replies == 1  # type: ignore[attr-defined]
    moved = await env.step("right")
    assert "row 0, column 1" in moved.observation[0].text
    assert env.env_steps == 2  # type: ignore[attr-defined]


async def test_the_episode_reward_is_the_envs_return() -> None:
    env = envhub.make("gym/CliffWalking-v1")
    await env.reset(seed=0)
    results = [await env.step(a) for a in ["up"] + ["right"] * 11 + ["down"]]
    assert results[-1].terminated
    assert [r.reward for r in results] == [-1.0] * 13
    assert results[-1].info["reward_components"]["episode_return"] == -13.0


async def test_the_reference_policy_is_optimal_where_the_game_is_deterministic() -> None:
    lake = (
        await run_batch(
            "gym/FrozenLake-v1", OraclePolicy(), episodes=5, seed=0, env_kwargs={"is_slippery": False}
        )
    ).episodes
    assert [e.reward for e in lake] == [1.0] * 5
    cliff = (await run_batch("gym/CliffWalking-v1", OraclePolicy(), episodes=3, seed=0)).episodes
    assert [e.reward for e in cliff] == [-13.0] * 3


async def test_the_reference_beats_the_random_baseline_on_taxi() -> None:
    oracle = (await run_batch("gym/Taxi-v4", OraclePolicy(), episodes=10, seed=0)).episodes
    random_ = (await run_batch("gym/Taxi-v4", RandomPolicy(seed=0), episodes=10, seed=0)).episodes
    assert all(e.reward > 0 and e.terminated for e in oracle)  # every passenger delivered
    assert sum(e.reward for e in random_) < sum(e.reward for e in oracle)
    assert all(e.error is None for e in random_)


def test_ansi_colours_become_brackets() -> None:
    assert plain_text("\x1b[41mS\x1b[0mFFF\nFHFH\n") == "[S]FFF\nFHFH"


def test_factory_for_knows_gymnasiums_ids_only() -> None:
    assert factory_for("FrozenLake-v1") is not None
    assert factory_for("EnvhubTestCounter-v0") is not None
    assert factory_for("NoSuchEnv-v0") is None
    cartpole = factory_for("CartPole-v1")
    assert cartpole is not None
    with pytest.raises(UnsupportedGymEnv, match="no 'ansi' render mode"):
        cartpole()


@pytest.mark.skipif(
    not hasattr(envhub.registration, "NAMESPACE_GROUP"),
    reason="the core's envhub.namespaces hook has not landed; factory_for is tested directly above",
)
async def test_gym_colon_id_plays_a_users_own_env_through_the_namespace_hook() -> None:
    env = envhub.make("gym:EnvhubTestCounter-v0")
    observation, _ = await env.reset(seed=0)
    assert "Observation: 0" in observation[-1].text
    rewards = [(await env.step("1")).reward for _ in range(3)]
    assert rewards == [1.0, 1.0, 1.0]
    assert envhub.make("gym/Taxi-v4").spec is not None
    with pytest.raises(KeyError):
        envhub.make("gym:NoSuchEnv-v0")


async def test_an_episode_round_trips_through_the_parquet_store(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    result = await rollout("gym/Blackjack-v1", OraclePolicy(), episodes=3, seed=0, out=out)
    stored = read_episodes(out)
    assert [e.reward for e in stored] == [e.reward for e in result.episodes]
    assert [e.messages for e in stored] == [e.messages for e in result.episodes]
    assert {e.env_id for e in stored} == {"gym/Blackjack-v1"}
