"""Every MiniWoB++ task in headless Chromium: does it load, what do random and scripted policies score?

For each task: `--episodes` episodes of the browser family's random baseline (`RandomWebPolicy`, acting
on the elements the text view lists, plus random clicks and keys) and, where the task has a scripted
solution, as many of the oracle. Prints one row per task and the summary; `--markdown` prints the table
for the catalogue. One browser per task family (MiniWoB's 500x320 window, FlightWoB's 600x800).

    .venv/bin/python envs/miniwob/benchmarks/baselines.py --episodes 5 --max-turns 8
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from envhub_browser.policy import RandomWebPolicy
from envhub_miniwob.catalog import tasks
from envhub_miniwob.solutions import SOLUTIONS
from envhub_miniwob.tasks import env_class

from envhub.policies import OraclePolicy
from envhub.policies.base import Policy
from envhub.records import Episode
from envhub.rollout import run_episode


async def play(task: str, policy: Policy, seeds: range, max_turns: int) -> list[Episode]:
    env = env_class(task)(screenshot=False, max_turns=max_turns)
    try:
        return [await run_episode(env, policy, seed=seed) for seed in seeds]
    finally:
        await env.close()


def mean(episodes: list[Episode]) -> float:
    return statistics.fmean(e.reward for e in episodes) if episodes else float("nan")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--tasks", nargs="*", help="task names (default: all)")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    names = args.tasks or list(tasks())
    seeds = range(args.episodes)
    rows = []
    for name in names:
        start = time.monotonic()
        randoms = await play(name, RandomWebPolicy(seed=0, width=500, height=320), seeds, args.max_turns)
        oracle = await play(name, OraclePolicy(), seeds, 30) if name in SOLUTIONS else []
        errors = sorted({e.error.kind for e in randoms + oracle if e.error})
        row = (name, mean(randoms), mean(oracle), ",".join(errors), time.monotonic() - start)
        rows.append(row)
        print(
            f"{name:32} random {row[1]:+.2f}  oracle {row[2]:+.2f}  errors [{row[3]}]  {row[4]:.1f} s",
            flush=True,
        )
    loaded = [r for r in rows if not r[3]]
    scripted = [r for r in rows if r[0] in SOLUTIONS]
    print(
        f"\n{len(loaded)}/{len(rows)} tasks played without an env error; {len(scripted)} scripted, "
        f"{sum(r[2] == 1.0 for r in scripted)} of them at 1.0 on every seed"
    )
    print(f"mean random reward {statistics.fmean(r[1] for r in rows):+.3f} over {len(rows)} tasks")
    if args.markdown:
        print("\n| task | random mean | oracle mean | errors |\n|---|---:|---:|---|")
        for name, rnd, orc, err, _ in rows:
            print(f"| {name} | {rnd:+.2f} | {'' if orc != orc else f'{orc:+.2f}'} | {err} |")


if __name__ == "__main__":
    asyncio.run(main())
