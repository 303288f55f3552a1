"""Episodes per second per core, for one env of each family: the per-node figures docs/scale.md plans from.

    python benchmarks/families.py [--episodes 24] [--concurrency 2] [--only code-single web-tasks ...]

Each family plays a batch with its bundled policy (the oracle where there is one) through `run_batch`,
in this process. Two figures per family:

- episodes/s: wall-clock throughput on this machine, as loaded as it is;
- CPU s/episode: user + system time of this process and of every child it reaped (bubblewrap sandboxes,
  their exec servers, Chromium and its driver), divided by the episodes. Its inverse, episodes/s per
  core, is what a node of N free cores gives at full use, and it hardly moves with other load, which
  wall time does. Docker's engine is not a child: a docker family's CPU in containerd and dockerd is not
  counted, so those rows are lower bounds on cost (marked).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from envhub.policies import load_policy
from envhub.rollout import RolloutLimits, run_batch


@dataclass(frozen=True)
class Family:
    name: str
    env_id: str
    policy: str
    note: str = ""


FAMILIES = (
    Family("no sandbox (arithmetic)", "arithmetic", "oracle"),
    Family("multi-turn game", "guess-number", "oracle"),
    Family("tool use", "tool-use", "oracle"),
    Family("code, one sandboxed grading", "code-single", "oracle"),
    Family("code REPL (Python worker)", "code-repl", "oracle"),
    Family("SWE (swe-mini, local runtime)", "swe-mini", "oracle"),
    Family("browser (Chromium)", "web-tasks", "oracle"),
)


def cpu_seconds() -> float:
    """CPU time of this process plus every child reaped so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def measure(family: Family, episodes: int, concurrency: int) -> tuple[float, float, float]:
    """(episodes/s, CPU s per episode, mean reward) of one batch, after a one-episode warm-up."""
    policy = load_policy(family.policy)
    limits = RolloutLimits(concurrency=concurrency)
    await run_batch(family.env_id, policy, episodes=1, seed=10_000, limits=limits)  # imports, caches
    cpu, wall = cpu_seconds(), time.perf_counter()
    result = await run_batch(family.env_id, policy, episodes=episodes, seed=0, limits=limits)
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    done = [e for e in result.episodes if e.error is None]
    if len(done) < episodes:
        errors = {e.error.kind for e in result.episodes if e.error is not None}
        raise RuntimeError(f"{family.env_id}: {episodes - len(done)} episodes failed ({errors})")
    return episodes / wall, cpu / episodes, sum(e.reward for e in done) / len(done)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="env ids to run (default: all families)")
    args = parser.parse_args()
    console = Console(width=120)
    title = f"{args.episodes} episodes per family, concurrency {args.concurrency}, {os.cpu_count()} cores"
    table = Table(title=title)
    for column in ("family", "env", "episodes/s", "CPU s / episode", "episodes/s per core", "mean reward"):
        table.add_column(column, justify="left" if column in ("family", "env") else "right")
    for family in FAMILIES:
        if args.only and family.env_id not in args.only:
            continue
        console.print(f"[dim]{family.env_id} ...[/dim]")
        try:
            rate, cpu, reward = asyncio.run(measure(family, args.episodes, args.concurrency))
        except Exception as exc:  # one family's missing part (no Chromium) must not hide the others
            failure = f"[red]{type(exc).__name__}: {exc}[/red]"
            table.add_row(family.name, family.env_id, "-", "-", "-", failure)
            continue
        figures = (f"{rate:,.2f}", f"{cpu:.4f}", f"{1 / cpu:,.1f}", f"{reward:.3f}")
        table.add_row(family.name, family.env_id, *figures)
    console.print(table)
    console.print(f"load average: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
