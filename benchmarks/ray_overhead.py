"""The Ray backend's overhead against the local runner, side by side in one run: local, Ray on one node,
Ray on a three-node cluster of this host (head + two sandbox nodes, `tests.envhub_testkit.ray_cluster`).

    python benchmarks/ray_overhead.py [--episodes 48] [--concurrency 8] [--trivial-episodes 400] [--rounds 2]

Rows: a sandboxed env (code-single, oracle: every episode grades its answer in a fresh bubblewrap
sandbox) and a trivial one (arithmetic, oracle: no sandbox, so the Ray path's own cost per episode
shows). Each backend plays one warm-up batch first (Ray's start, the actors' envs, the first sandbox),
then the timed batch, with the same seeds. The whole sequence runs `--rounds` times and each cell keeps
its best rate: on a shared host the load of other jobs moves single runs by 2x. Ray's per-episode
overhead is the difference of seconds per episode at equal concurrency; "per core" divides by the
cores the machine has (every node shares them).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import pickle
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.envhub_testkit, for the cluster

from envhub.policies import load_policy  # noqa: E402
from envhub.rollout import RayEpisodePool, RolloutLimits, plan, rollout  # noqa: E402
from tests.envhub_testkit.ray_cluster import NodeSpec, ray_cluster  # noqa: E402

ORACLE = functools.partial(load_policy, "oracle")


async def timed(env_id: str, episodes: int, concurrency: int, backend: str | RayEpisodePool) -> float:
    """Episodes per second of one batch after a warm-up batch on the same backend."""
    limits = RolloutLimits(concurrency=concurrency)
    await rollout(env_id, ORACLE, episodes=plan(concurrency, seed=10_000), limits=limits, runs_on=backend)
    started = time.perf_counter()
    result = await rollout(env_id, ORACLE, episodes=plan(episodes, seed=0), limits=limits, runs_on=backend)
    elapsed = time.perf_counter() - started
    failed = sum(e.error is not None for e in result.episodes)
    if failed or len(result.episodes) != episodes:
        raise RuntimeError(
            f"{env_id} on {backend}: {failed} failed, {len(result.episodes)}/{episodes} played"
        )
    return episodes / elapsed


async def record_bytes(env_id: str) -> int:
    """The pickled size of one episode record: what an actor returns (inline in Ray's reply below 100 KiB)."""
    result = await rollout(env_id, ORACLE, episodes=plan(1, seed=0))
    return len(pickle.dumps(result.episodes[0]))


def measure(rows: list[tuple[str, int]], concurrency: int) -> dict[tuple[str, str], float]:
    """Episodes per second of each env on each backend: local, Ray on one node, Ray on the cluster."""
    import ray

    rates: dict[tuple[str, str], float] = {}
    for env_id, episodes in rows:
        rates[env_id, "local"] = asyncio.run(timed(env_id, episodes, concurrency, "local"))
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.WARNING)
    try:
        for env_id, episodes in rows:
            with RayEpisodePool() as pool:
                rates[env_id, "ray 1 node"] = asyncio.run(timed(env_id, episodes, concurrency, pool))
    finally:
        ray.shutdown()
    cores = os.cpu_count() or 1
    head = NodeSpec("head", cpus=1)
    workers = [NodeSpec(name, cpus=cores, resources={"sandbox": cores * 2}) for name in ("a", "b")]
    with ray_cluster(head, workers, pythonpath=[str(ROOT)]):
        for env_id, episodes in rows:
            with RayEpisodePool(resources={"sandbox": 1}) as pool:  # both rows on the two sandbox nodes
                rates[env_id, "ray cluster (2 nodes)"] = asyncio.run(
                    timed(env_id, episodes, concurrency, pool)
                )
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=48, help="sandboxed (code-single) episodes per row")
    parser.add_argument("--trivial-episodes", type=int, default=400, help="arithmetic episodes per row")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="repeat everything; each cell keeps its best")
    args = parser.parse_args()
    rows = [("code-single", args.episodes), ("arithmetic", args.trivial_episodes)]
    sizes = {env_id: asyncio.run(record_bytes(env_id)) for env_id, _ in rows}
    rates: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for cell, rate in measure(rows, args.concurrency).items():
            rates[cell] = max(rate, rates.get(cell, 0.0))
    cores = os.cpu_count() or 1
    title = f"Ray overhead vs local ({cores} cores, concurrency {args.concurrency}, best of {args.rounds})"
    table = Table(title=title)
    for column in ("env", "backend", "episodes/s", "episodes/s/core", "vs local", "overhead ms/episode"):
        table.add_column(column, justify="left" if column in ("env", "backend") else "right")
    for env_id, _ in rows:
        local = rates[env_id, "local"]
        for backend in ("local", "ray 1 node", "ray cluster (2 nodes)"):
            rate = rates[env_id, backend]
            overhead = (1 / rate - 1 / local) * args.concurrency * 1000  # per episode, at that concurrency
            table.add_row(
                env_id, backend, f"{rate:.2f}", f"{rate / cores:.2f}", f"{rate / local:.0%}",
                "" if backend == "local" else f"{overhead:+.1f}",
            )  # fmt: skip
    console = Console(width=140)
    console.print(table)
    console.print(
        "episode record, pickled: " + ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in sizes.items())
    )


if __name__ == "__main__":
    main()
