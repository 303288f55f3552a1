"""Every HumanEval problem played by the oracle (the canonical solution) and the random baseline.

    .venv/bin/python envs/humaneval/benchmarks/heval_sweep.py [--concurrency 4]

Prints one row per policy (episodes, mean reward, problems below/above the expected figure, seconds)
and the ids of any problem whose canonical solution did not score 1.0. Exits 1 if one did not.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from envhub_humaneval import humaneval_tasks

import envhub
from envhub.policies import OraclePolicy, Policy, RandomPolicy
from envhub.rollout import run_episode


async def sweep(policy: Policy, concurrency: int) -> tuple[list[float], float]:
    """The reward of each problem, in order, and the wall time of the sweep."""
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> float:
        async with gate:
            episode = await run_episode(envhub.make("humaneval-v0", task=index), policy, seed=index)
            return episode.reward

    started = time.perf_counter()
    rewards = await asyncio.gather(*(one(i) for i in range(len(humaneval_tasks()))))
    return list(rewards), time.perf_counter() - started


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    ids = [t.id for t in humaneval_tasks()]
    print(f"{'policy':8} {'problems':>8} {'mean':>6} {'scored 1':>8} {'seconds':>8}")
    failed: list[str] = []
    for name, policy, expected in (("oracle", OraclePolicy(), 1.0), ("random", RandomPolicy(seed=0), 0.0)):
        rewards, seconds = await sweep(policy, args.concurrency)
        ones = sum(r == 1.0 for r in rewards)
        print(f"{name:8} {len(rewards):8} {sum(rewards) / len(rewards):6.3f} {ones:8} {seconds:8.1f}")
        if name == "oracle":
            failed = [i for i, r in zip(ids, rewards, strict=True) if r != expected]
    if failed:
        print(f"canonical solutions below 1.0: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
