"""Thousands of concurrent model-driven episodes through the runner and the OpenAI policy, over real sockets.

The loopback server is the benchmark's (benchmarks/concurrency.py): a bare ASGI app under uvicorn, in
its own process, answering every chat completion with "50" after a short delay, as a model would.
httpcore's pool scans its connections, and for each request waiting in it its connections again,
whenever a request starts or ends; NeMo-Gym reported a connection-pool stall near 16,000 concurrent
requests. This guards that thousands of requests waiting for a connection stay cheap for our client.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpcore
import pytest

from envhub.inference.client import CONNECTIONS_PER_POOL
from envhub.policies.openai import OpenAIPolicy
from envhub.rollout import RolloutLimits, run_batch

SERVER = Path(__file__).parents[1] / "benchmarks" / "concurrency.py"


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


def play(base_url: str, episodes: int, connections: int, budget: float) -> list[str]:
    """Play `episodes` one-turn guess-number episodes at once over `connections`; one error per failure."""
    policy = OpenAIPolicy(base_url, "loopback", logprobs=False, max_connections=connections)

    async def batch() -> list[str]:
        try:
            result = await run_batch(
                "guess-number-v0",
                policy,
                episodes=episodes,
                limits=RolloutLimits(concurrency=episodes, time_budget=budget, retries=0),
                env_kwargs={"low": 1, "high": 10**9, "max_turns": 1},
            )
        finally:
            await policy.close()
        assert not result.not_started
        return [e.error.message for e in result.episodes if e.error is not None]

    return asyncio.run(batch())


def test_thousands_of_episodes_waiting_for_connections_do_not_stall_the_pool(
    loopback: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,500 concurrent episodes over 150 connections all finish within a generous budget, and httpx's
    bookkeeping per request stays near one scan of the pool, though 1,350 requests wait in it.

    The bookkeeping is counted, not timed: calls to a connection's `is_idle`, which httpcore's pool
    repeats over its connections whenever a request starts or ends (about 4,800 per request here).
    A pool that scanned every connection for every waiting request would make 200,000.
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
    assert per_request < 10 * CONNECTIONS_PER_POOL**2, f"{per_request:.0f} is_idle calls per request"
