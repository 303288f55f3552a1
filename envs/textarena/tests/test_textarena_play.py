"""Arrival checks for the textarena games: seeding, the oracle, the random baseline, the Parquet store."""

from __future__ import annotations

from pathlib import Path

import pytest
from envhub_textarena.opponents import try_move

import envhub
from envhub.core import Action
from envhub.messages import Message
from envhub.policies import OraclePolicy, Policy, RandomPolicy
from envhub.rollout import rollout, run_batch
from envhub.store import read_episodes
from envhub.tools import ToolSpec

SAMPLE = [
    "textarena/2048-v0",
    "textarena/tic-tac-toe-v0",
    "textarena/kuhn-poker-v0",
    "textarena/sudoku-v0",
    "textarena/nim-v0",
    "textarena/connect-four-v0",
    "textarena/simple-negotiation-v0",
    "textarena/three-player-tic-tac-toe-v0",
]
"""Single-player, two-player (the opponent moving first in Kuhn poker, a game played in words) and
three-player games; benchmarks/sweep.py plays every available game."""


class Slides(Policy):
    """Slides the 2048 tiles left and up in turn: the same moves in every episode."""

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        return "[Left]" if len(messages) % 4 == 1 else "[Up]"


async def first_observation(env_id: str, seed: int) -> str:
    async with envhub.make(env_id) as env:
        observation, _ = await env.reset(seed=seed)
        return "\n".join(m.text for m in observation)


@pytest.mark.parametrize("env_id", ["textarena/2048-v0", "textarena/kuhn-poker-v0", "textarena/sudoku-v0"])
async def test_the_same_seed_gives_the_same_game(env_id: str) -> None:
    assert await first_observation(env_id, 3) == await first_observation(env_id, 3)
    assert len({await first_observation(env_id, s) for s in range(4)}) > 1


async def test_concurrent_episodes_replay_as_they_would_alone() -> None:
    """textarena draws from the global random state; each episode must keep its own."""
    alone = {
        e.seed: [m.text for m in e.messages]
        for e in (await run_batch("textarena/2048", Slides(), episodes=2)).episodes
    }
    batch = (await run_batch("textarena/2048", Slides(), episodes=[0, 1, 0, 1], seed=0)).episodes
    assert len(batch) == 4 and alone[0] != alone[1]
    for episode in batch:
        assert [m.text for m in episode.messages] == alone[episode.seed]


@pytest.mark.parametrize(
    "env_id", ["textarena/guess-the-number-v0", "textarena/mastermind-v0", "textarena/tower-of-hanoi-v0"]
)
async def test_the_oracle_wins_every_seed(env_id: str) -> None:
    episodes = (await run_batch(env_id, OraclePolicy(), episodes=4, seed=0)).episodes
    for episode in episodes:
        assert episode.error is None, episode.error
        assert episode.terminated
        assert episode.reward == 1.0, episode.reward_components


async def test_games_without_a_solver_say_so_to_the_oracle() -> None:
    episode = (await run_batch("textarena/tic-tac-toe", OraclePolicy(), episodes=1)).episodes[0]
    assert episode.error is not None and "no reference solution" in episode.error.message


@pytest.mark.parametrize("env_id", SAMPLE)
async def test_a_random_policy_finishes_within_max_turns(env_id: str) -> None:
    episodes = (await run_batch(env_id, RandomPolicy(seed=0), episodes=2, seed=0)).episodes
    for episode in episodes:
        assert episode.error is None, episode.error
        assert episode.terminated and not episode.truncated
        assert episode.reward_components["finished"] == 1.0
        assert -1.0 <= episode.reward <= 1.0


async def test_a_legal_move_is_kept_and_an_illegal_one_refused() -> None:
    env = envhub.make("textarena/tic-tac-toe")
    await env.reset(seed=0)
    game = env.ta_env  # type: ignore[attr-defined]  # the board is empty: the agent moves first
    with env.random.active():  # type: ignore[attr-defined]
        assert try_move(game, "[4]") == (True, None)
        assert not try_move(game, "[42]")[0]
        assert not try_move(game, "no move here")[0]


async def test_the_random_opponent_plays_only_legal_moves() -> None:
    """Tic-tac-toe against the random opponent: every opponent move is a legal mark on the board."""
    for seed in range(3):
        episode = (
            await run_batch("textarena/tic-tac-toe", RandomPolicy(seed=seed), episodes=1, seed=seed)
        ).episodes[0]
        assert "Player 1 attempted an invalid move" not in "\n".join(m.text for m in episode.messages)


async def test_one_episode_round_trips_through_the_parquet_store(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    result = await rollout("textarena/guess-the-number", OraclePolicy(), episodes=2, out=out)
    stored = read_episodes(out)
    assert [e.episode_id for e in stored] == [e.episode_id for e in result.episodes]
    assert [e.reward for e in stored] == [1.0, 1.0]
    assert stored[0].env_id == "textarena/guess-the-number-v0"
    assert stored[0].messages == result.episodes[0].messages
