"""The runner's limits: timeouts, retries of infrastructure failures only, budgets, cancellation."""

from __future__ import annotations

import asyncio
import itertools
import random
import re
from typing import ClassVar

import pytest

import envhub
from envhub.messages import Message
from envhub.policies import OraclePolicy, Policy, ScriptedPolicy
from envhub.rollout import RolloutLimits, run_batch
from envhub.tools import ToolSpec

_ids = itertools.count()


class Tracked(envhub.MultiTurnEnv):
    """Counts live instances, crashes on demand, and takes `delay` seconds per reply."""

    max_turns = 2
    created: ClassVar[list[Tracked]] = []
    crash_first: ClassVar[int] = 0
    delay: ClassVar[float] = 0.0
    in_flight: ClassVar[int] = 0
    most_in_flight: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.number = len(Tracked.created)
        Tracked.created.append(self)

    def setup(self, rng: random.Random) -> str:
        self.secret = rng.randint(0, 9)
        return "Guess a digit."

    async def respond(self, text: str) -> str | envhub.Reply:
        Tracked.in_flight += 1
        Tracked.most_in_flight = max(Tracked.most_in_flight, Tracked.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            Tracked.in_flight -= 1
        if self.number < Tracked.crash_first:
            raise ConnectionResetError("sandbox died")
        return envhub.Reply(text="ok", done=True) if text == str(self.secret) else "no"

    async def close(self) -> None:
        self.closed = True

    @envhub.reward
    def won(self, answer: str) -> float:
        return float(answer == str(self.secret))

    def reference_action(self, messages: list[Message]) -> str:
        return str(self.secret)


@pytest.fixture
def tracked() -> str:
    Tracked.created = []
    Tracked.crash_first = 0
    Tracked.delay = 0.0
    Tracked.in_flight = Tracked.most_in_flight = 0
    env_id = f"tracked{next(_ids)}-v0"
    envhub.register(env_id, Tracked)
    return env_id


class Hanging(Policy):
    name = "hanging"

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> str:
        await asyncio.sleep(60)
        return "never"


async def test_infrastructure_failure_is_retried_with_a_fresh_env(tracked: str) -> None:
    Tracked.crash_first = 1
    result = await run_batch(
        tracked, OraclePolicy(), episodes=1, limits=RolloutLimits(concurrency=1, retries=2)
    )
    (episode,) = result.episodes
    assert episode.error is None and episode.reward == 1.0 and episode.attempts == 2
    assert len(Tracked.created) == 2 and all(env.closed for env in Tracked.created)


async def test_retries_are_bounded_and_the_last_error_is_recorded(tracked: str) -> None:
    Tracked.crash_first = 100
    result = await run_batch(
        tracked, OraclePolicy(), episodes=2, limits=RolloutLimits(concurrency=1, retries=2)
    )
    assert [e.attempts for e in result.episodes] == [3, 3]
    assert all(
        e.error is not None and e.error.message == "ConnectionResetError: sandbox died"
        for e in result.episodes
    )
    assert all(env.closed for env in Tracked.created) and len(Tracked.created) == 6


async def test_agent_failures_are_never_retried(tracked: str) -> None:
    result = await run_batch(tracked, ScriptedPolicy(["x", "y"]), episodes=3, limits=RolloutLimits(retries=3))
    assert all(
        e.attempts == 1 and e.error is None and e.truncated and e.reward == 0.0 for e in result.episodes
    )


async def test_hanging_policy_hits_the_step_timeout(tracked: str) -> None:
    limits = RolloutLimits(step_timeout=0.05, retries=1)
    (episode,) = (await run_batch(tracked, Hanging(), episodes=1, limits=limits)).episodes
    assert episode.error is not None and episode.error.kind == "timeout"
    assert episode.error.message == "the policy call took longer than the step timeout (0.05 s)"
    assert episode.attempts == 2


async def test_episode_timeout_cuts_off_and_truncates_without_retry(tracked: str) -> None:
    Tracked.delay = 10
    limits = RolloutLimits(episode_timeout=0.05, retries=3)
    (episode,) = (await run_batch(tracked, OraclePolicy(), episodes=1, limits=limits)).episodes
    assert episode.truncated and episode.attempts == 1
    assert episode.error is not None and episode.error.kind == "cutoff"
    # During the step that sleeps 10 s, or, on a busy host, already during the reset.
    expected = r"the episode timeout \(0\.05 s\) ran out during the env (step|reset)"
    assert re.search(expected, episode.error.message), episode.error.message


async def test_time_budget_cuts_stragglers_and_leaves_the_rest_for_resume(tracked: str) -> None:
    Tracked.delay = 0.1
    limits = RolloutLimits(concurrency=2, time_budget=0.25)
    result = await run_batch(tracked, ScriptedPolicy(["x", "y"]), episodes=20, limits=limits)
    ran = {int(e.episode_id) for e in result.episodes}
    assert ran.isdisjoint(result.not_started) and ran | set(result.not_started) == set(range(20))
    assert result.not_started
    cut = [e for e in result.episodes if e.error is not None]
    assert cut and all(e.truncated and e.error.kind == "cutoff" for e in cut)  # type: ignore[union-attr]
    assert "the batch time budget (0.25 s)" in cut[0].error.message  # type: ignore[union-attr]


async def test_backend_concurrency_caps_episodes_in_flight(tracked: str) -> None:
    Tracked.delay = 0.01
    limits = RolloutLimits(concurrency=4, backend_concurrency={"none": 1})
    await run_batch(tracked, ScriptedPolicy(["x", "y"]), episodes=6, limits=limits)
    assert Tracked.most_in_flight == 1
    Tracked.most_in_flight = 0
    await run_batch(tracked, ScriptedPolicy(["x", "y"]), episodes=6, limits=RolloutLimits(concurrency=4))
    assert Tracked.most_in_flight == 4


async def test_cancelling_a_batch_closes_every_env(tracked: str) -> None:
    Tracked.delay = 10
    batch = asyncio.create_task(
        run_batch(tracked, OraclePolicy(), episodes=8, limits=RolloutLimits(concurrency=4))
    )
    while Tracked.in_flight < 4:  # noqa: ASYNC110  (polling the env's own counter is the point)
        await asyncio.sleep(0.01)
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    assert len(Tracked.created) == 4 and all(env.closed for env in Tracked.created)
