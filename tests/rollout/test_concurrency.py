"""Thousands of concurrent model-driven episodes through the runner and the OpenAI policy, over real sockets.

The loopback server is the benchmark's (benchmarks/concurrency.py): a raw asyncio HTTP server in its
own process, answering every chat completion with "50" after a short delay, as a model would.
httpcore's pool scans its connections, and for each request waiting in it its connections again,
whenever a request starts or ends; NeMo-Gym reported a connection-pool stall near 16,000 concurrent
requests. These guard that thousands of requests waiting for a connection stay cheap for our client,
that a turn leaves no garbage that only the cyclic GC can free, and that the batch GC policy
(envhub.rollout.gc_policy) is in force during a batch and undone after it.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpcore
import pytest

from envhub.policies.openai import OpenAIPolicy
from envhub.records import Episode
from envhub.rollout import RolloutLimits, run_batch
from envhub.rollout.gc_policy import MIDDLE, OLD, YOUNG, batch_gc

SERVER = Path(__file__).parents[2] / "benchmarks" / "concurrency.py"


@pytest.fixture(scope="module")
def loopback() -> Iterator[str]:
    """The benchmark's loopback chat server with a 0.2 s "model" delay; its /v1 base URL."""
    command = [sys.executable, str(SERVER), "serve", "--port", "0", "--delay", "0.2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("listening on "), f"the loopback server did not start: {line!r}"
    yield f"http://127.0.0.1:{int(line.split()[-1])}/v1"
    process.terminate()
    process.wait(timeout=10)
    process.stdout.close()


def play(
    base_url: str,
    episodes: int,
    connections: int,
    budget: float,
    *,
    turns: int = 1,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[str]:
    """Play `episodes` guess-number episodes of `turns` turns at once over `connections`; one error per
    failure (an episode that did not end counts as one)."""
    return asyncio.run(batch(base_url, episodes, connections, budget, turns=turns, on_episode=on_episode))


async def batch(
    base_url: str,
    episodes: int,
    connections: int,
    budget: float,
    *,
    turns: int = 1,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[str]:
    """`play`, in the running event loop."""
    policy = OpenAIPolicy(base_url, "loopback", logprobs=False, max_connections=connections)
    try:
        result = await run_batch(
            "guess-number-v0",
            policy,
            episodes=episodes,
            limits=RolloutLimits(concurrency=episodes, time_budget=budget, retries=0),
            env_kwargs={"low": 1, "high": 10**9, "max_turns": turns},
            on_episode=on_episode,
        )
    finally:
        await policy.close()
    assert not result.not_started
    unfinished = [f"episode {e.episode_id} did not end" for e in result.episodes if not e.turns]
    return [e.error.message for e in result.episodes if e.error is not None] or unfinished


def test_thousands_of_episodes_waiting_for_connections_do_not_stall_the_pool(
    loopback: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,500 concurrent episodes over 150 connections all finish within a generous budget, and httpx's
    bookkeeping per request stays a few calls, though 1,350 requests wait for a connection.

    The bookkeeping is counted, not timed: calls to a connection's `is_idle`, which httpcore's pool
    repeats over all its connections whenever a request starts or ends, with a socket check for each
    idle one. With each connection its own pool that is a few calls per request; over pools of 32
    connections it was about 4,400, and one pool of 150 with requests waiting in it made 130,000.
    """
    calls = [0]
    is_idle = httpcore.AsyncHTTPConnection.is_idle

    def counted(connection: httpcore.AsyncHTTPConnection) -> bool:
        calls[0] += 1
        return is_idle(connection)

    monkeypatch.setattr(httpcore.AsyncHTTPConnection, "is_idle", counted)
    episodes = 1500
    errors = play(loopback, episodes, connections=150, budget=120)
    assert errors == [], f"{len(errors)} of {episodes} episodes failed, e.g. {errors[0]}"
    per_request = calls[0] / episodes
    assert per_request <= 10, f"{per_request:.0f} is_idle calls per request"


def test_turns_through_the_openai_policy_leave_no_garbage_in_reference_cycles(loopback: str) -> None:
    """60 turns through the runner, the OpenAI policy and its HTTP client free everything they made by
    reference counting: nothing is left for the cyclic GC, whose full collections are what slows a
    process with thousands of episodes in flight.

    Before the fix each turn left ~53 objects in cycles: tenacity's retry state (a thread-local, a
    Future with its Condition and RLock) and httpx's response bound to its own stream.
    """

    async def measured() -> list[object]:
        assert await batch(loopback, 4, connections=4, budget=120, turns=3) == []  # imports, caches
        policy = OpenAIPolicy(loopback, "loopback", logprobs=False, max_connections=8)
        env_kwargs = {"low": 1, "high": 10**9, "max_turns": 3}
        limits = RolloutLimits(concurrency=20, time_budget=120, retries=0)
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection would free stays in gc.garbage instead
        try:
            result = await run_batch(
                "guess-number-v0", policy, episodes=20, limits=limits, env_kwargs=env_kwargs
            )
            gc.collect()  # before the connections close: closing a socket transport leaves a cycle, once
            garbage = list(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            await policy.close()
        assert [e.error for e in result.episodes if e.error is not None] == []
        assert sum(len(e.turns) for e in result.episodes) == 60
        return garbage

    garbage = asyncio.run(measured())
    kinds = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in garbage)
    assert not garbage, f"{len(garbage)} objects in reference cycles after 60 turns: {kinds.most_common(8)}"


def test_batch_gc_sets_its_thresholds_and_freezes_for_the_batch_only() -> None:
    """Inside: the policy's thresholds, and what was alive before is frozen. After (even after an
    error): the thresholds as they were and nothing frozen. A nested batch changes nothing."""
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0

    def failing_batch() -> None:
        with batch_gc():
            assert gc.get_threshold() == (YOUNG, MIDDLE, OLD)
            frozen = gc.get_freeze_count()
            assert frozen > 0
            with batch_gc(young=10, middle=10, old=10):
                assert gc.get_threshold() == (YOUNG, MIDDLE, OLD)
            assert gc.get_threshold() == (YOUNG, MIDDLE, OLD)
            assert gc.get_freeze_count() == frozen
            raise RuntimeError("the batch failed")

    with pytest.raises(RuntimeError, match="the batch failed"):
        failing_batch()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_batch_gc_leaves_objects_the_caller_froze_frozen() -> None:
    """A process that froze its own objects (before forking workers) finds them still frozen after."""
    mine = [[n] for n in range(100)]  # the caller's containers, frozen by the caller
    gc.freeze()
    try:
        with batch_gc():
            assert gc.get_threshold() == (YOUNG, MIDDLE, OLD)
        # Frozen objects are left out of gc.get_objects(). The freeze count is no measure: a frozen
        # object another thread (a sandbox owner's heartbeat) lets go of leaves the frozen set.
        collected = {id(o) for o in gc.get_objects()}
        assert not [item for item in mine if id(item) in collected], "batch_gc unfroze the caller's objects"
    finally:
        gc.unfreeze()


def test_hundreds_of_concurrent_episodes_finish_under_the_batch_gc_policy(loopback: str) -> None:
    """300 concurrent episodes of three turns over 64 connections all finish, with the policy in force
    while they run (seen from each finished episode's callback)."""
    seen: set[tuple[int, int, int]] = set()
    with batch_gc():
        errors = play(
            loopback,
            300,
            connections=64,
            budget=240,
            turns=3,
            on_episode=lambda e: seen.add(gc.get_threshold()),
        )
    assert errors == []
    assert seen == {(YOUNG, MIDDLE, OLD)}
