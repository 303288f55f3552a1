"""`envhub.rollout.rollout`: the library entry point behind `envhub rollout`, for every caller (issue 15.1).

Episodes are references, so a GRPO group is G references to one task; the store, resume and interrupt
handling live here, not in the command.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest

from envhub.core import Action, Env
from envhub.messages import Message
from envhub.policies import OraclePolicy, Policy, load_policy
from envhub.rollout import RolloutLimits, plan, rollout
from envhub.store import load_manifest, read_episodes
from envhub.tools import ToolSpec


class StopsAfter(Policy):
    """Plays the oracle for the first `episodes` episodes, then hangs until cancelled."""

    name = "oracle"

    def __init__(self, episodes: int) -> None:
        self.left = episodes
        self.hanging = asyncio.Event()

    def for_episode(self, env: Env) -> Policy:
        self.left -= 1
        return OraclePolicy(env) if self.left >= 0 else _Hang(self.hanging)

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        raise AssertionError("played through for_episode only")


class _Hang(Policy):
    def __init__(self, hanging: asyncio.Event) -> None:
        self.hanging = hanging

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        self.hanging.set()
        await asyncio.Event().wait()
        raise AssertionError("never reached")


async def test_a_group_is_references_to_one_task_and_the_resolved_id_is_played() -> None:
    result = await rollout("arithmetic", OraclePolicy(), episodes=plan(2, rollouts=3, seed=10))
    assert result.env_id == "arithmetic-v0" and result.out is None
    assert [e.seed for e in result.episodes] == [10, 10, 10, 11, 11, 11]
    assert {e.env_id for e in result.episodes} == {"arithmetic-v0"}
    assert all(e.reward == 1.0 for e in result.episodes)


async def test_interrupted_keeps_what_finished_and_a_resume_completes_it_exactly(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    holding = StopsAfter(2)
    limits = RolloutLimits(concurrency=1)
    batch = asyncio.create_task(rollout("arithmetic", holding, episodes=6, limits=limits, out=out))
    await holding.hanging.wait()  # episodes 0 and 1 are stored, episode 2 is in flight
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    kept = read_episodes(out)
    assert [e.episode_id for e in kept] == ["000000", "000001"]
    manifest = load_manifest(out)
    assert manifest is not None and not manifest.complete

    resumed = await rollout("arithmetic", OraclePolicy(), episodes=6, limits=limits, out=out, resume=True)
    assert resumed.played == 4
    assert [e.episode_id for e in resumed.episodes] == [f"{i:06d}" for i in range(6)]
    assert resumed.episodes[:2] == kept


async def test_a_factory_is_built_and_closed_here_and_ray_takes_only_factories(tmp_path: Path) -> None:
    factory = functools.partial(load_policy, "oracle")
    result = await rollout("countdown", factory, episodes=3, out=tmp_path / "b", policy_label="oracle")
    assert [e.reward for e in result.episodes] == [1.0, 1.0, 1.0]
    with pytest.raises(TypeError, match="pass a picklable factory"):
        await rollout("countdown", OraclePolicy(), episodes=1, runs_on="ray")


async def test_a_stored_batch_needs_references_in_order(tmp_path: Path) -> None:
    refs = plan(3)[::-1]
    with pytest.raises(ValueError, match=r"indices 0, 1, \.\.\., n-1 in order"):
        await rollout("countdown", OraclePolicy(), episodes=refs, out=tmp_path / "b")
