"""A fork batch obeys the per-sandbox caps (`RolloutLimits.backend_concurrency`) as a plain batch does:
both are driven by one loop, and a fork group holds its sandbox kind's slot from its prefix's reset to
its last child's end."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import ClassVar

import pytest

import envhub
from envhub.policies import OraclePolicy
from envhub.registration import registry
from envhub.rollout import RolloutLimits, plan, rollout

DOCKER_ID = "test-fork-cap-docker-v0"
PLAIN_ID = "test-fork-cap-plain-v0"


class Tasks(envhub.MultiTurnEnv):
    """Three turns of guessing; counts the fork groups in flight (a class-wide figure): a group starts at
    its prefix's reset and ends when its last child is graded."""

    max_turns = 3
    live: ClassVar[set[int]] = set()
    most = 0

    def __init__(self, backend: str = "none", *, max_turns: int | None = None) -> None:
        super().__init__(max_turns=max_turns)
        self.backend = backend

    async def setup(self, rng: random.Random) -> str:
        self.task = rng.randint(0, 1 << 30)
        type(self).live.add(self.task)
        type(self).most = max(type(self).most, len(type(self).live))
        await asyncio.sleep(0.05)  # long enough for every uncapped group to have started too
        return "Guess."

    def respond(self, text: str) -> str:
        return "no"

    @envhub.reward
    def graded(self) -> float:
        type(self).live.discard(self.task)
        return 1.0

    def reference_action(self, messages: list[envhub.Message]) -> str:
        return "1"


@pytest.fixture
def tasks() -> Iterator[type[Tasks]]:
    envhub.register(DOCKER_ID, Tasks, sandbox="docker")
    envhub.register(PLAIN_ID, Tasks)
    Tasks.live, Tasks.most = set(), 0
    yield Tasks
    for env_id in (DOCKER_ID, PLAIN_ID):
        registry._registrations.pop(env_id)


CAPPED = RolloutLimits(concurrency=4, backend_concurrency={"docker": 1})


async def test_a_fork_batch_holds_one_group_at_a_time_under_a_cap_of_one(tasks: type[Tasks]) -> None:
    result = await rollout(DOCKER_ID, OraclePolicy(), episodes=plan(4, rollouts=3), fork_at=1, limits=CAPPED)
    assert len(result.episodes) == 12 and all(e.error is None for e in result.episodes)
    assert tasks.most == 1  # the docker cap held for fork groups too


async def test_an_uncapped_fork_batch_plays_groups_side_by_side(tasks: type[Tasks]) -> None:
    """The control: the same batch of an env without a sandbox runs its groups at once."""
    await rollout(PLAIN_ID, OraclePolicy(), episodes=plan(4, rollouts=3), fork_at=1, limits=CAPPED)
    assert tasks.most > 1


async def test_a_cap_on_the_backend_option_holds_for_fork_groups(tasks: type[Tasks]) -> None:
    """`--kwarg backend=docker` is read by the same rule (`registration.sandbox_kind`)."""
    await rollout(
        PLAIN_ID,
        OraclePolicy(),
        episodes=plan(4, rollouts=3),
        fork_at=1,
        limits=CAPPED,
        env_kwargs={"backend": "docker"},
    )
    assert tasks.most == 1
