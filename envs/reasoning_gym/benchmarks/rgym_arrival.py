"""The arrival figures of every Reasoning Gym dataset: oracle (reference answer) and random-baseline means.

    .venv/bin/python envs/reasoning_gym/benchmarks/rgym_arrival.py [--seeds N]

Plays seeds 0..N-1 (default 20) of every `reasoning-gym/<name>-v0` with default options (the composite
dataset with a two-dataset mixture) and prints one Markdown row per dataset, then the totals. A dataset
whose items carry no reference answer shows `-` for the oracle and says why.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import time

from envhub_reasoning_gym import dataset_names, env_id

from envhub.policies import OraclePolicy, Policy, RandomPolicy
from envhub.records import Episode
from envhub.rollout import run_batch

COMPOSITE = {
    "datasets": [
        {"name": "chain_sum", "weight": 1, "config": {}},
        {"name": "graph_color", "weight": 1, "config": {}},
    ]
}


async def play(name: str, policy: Policy, seeds: int) -> list[Episode]:
    kwargs = COMPOSITE if name == "composite" else {}
    return (await run_batch(env_id(name), policy, episodes=seeds, seed=0, env_kwargs=kwargs)).episodes


def mean(episodes: list[Episode]) -> float:
    return sum(e.reward for e in episodes) / len(episodes)


async def main(seeds: int) -> None:
    version = importlib.metadata.version("reasoning-gym")
    print(f"reasoning-gym {version}, seeds 0..{seeds - 1}, default options\n")
    print("| id | oracle mean | random mean | oracle at 1.0 | note |")
    print("|---|---|---|---|---|")
    oracle_means, random_means, perfect = [], [], 0
    started = time.monotonic()
    for name in dataset_names():
        oracle = await play(name, OraclePolicy(), seeds)
        randoms = await play(name, RandomPolicy(seed=0), seeds)
        random_mean = mean(randoms)
        random_means.append(random_mean)
        errors = [e.error for e in oracle if e.error is not None]
        if errors:
            note = errors[0].message.split(";")[0]
            print(f"| `{env_id(name)}` | - | {random_mean:.3f} | - | {note} |")
            continue
        solved = sum(e.reward == 1.0 for e in oracle)
        perfect += solved == seeds
        oracle_means.append(mean(oracle))
        print(f"| `{env_id(name)}` | {mean(oracle):.3f} | {random_mean:.3f} | {solved}/{seeds} | |")
    print(
        f"\n{len(dataset_names())} ids; oracle: {len(oracle_means)} with a reference, {perfect} at 1.0 on "
        f"every seed, mean {sum(oracle_means) / len(oracle_means):.3f}; random mean "
        f"{sum(random_means) / len(random_means):.4f}; {time.monotonic() - started:.0f} s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="episodes per dataset and policy")
    asyncio.run(main(parser.parse_args().seeds))
