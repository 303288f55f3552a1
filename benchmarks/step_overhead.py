"""Per-step cost of envhub's async contract next to a plain gymnasium step, measured in one run.

    python benchmarks/step_overhead.py [--steps 200000] [--episodes 10000]

Rows:
- gymnasium (raw): a no-op `gymnasium.Env.step`, the baseline.
- gymnasium.make: the same env behind gymnasium's default wrappers, what most users actually call.
- envhub Env (async): a no-op `envhub.Env.step` awaited in a loop: the cost of the contract itself.
- envhub Env + make()'s wrappers: the same env in `OrderEnforcing(TurnLimit(env))`, as `envhub.make` gives it.
- envhub MultiTurnEnv: a no-op env written with the authoring base: action parsing, turn bookkeeping and
  the user's sync `respond` sent to a worker thread (the price of never blocking the event loop).
Then 10,000 concurrent episodes of the no-op envs on one event loop, which must all finish without error.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from rich.console import Console
from rich.table import Table

import envhub
from envhub.integrations.gymnasium import UnicodeText
from envhub.wrappers import apply_wrappers

GOAL = 3.0  # the async contract should cost at most 3x a gymnasium step


class NoopGym(gym.Env[str, str]):
    observation_space = UnicodeText(16, min_length=0)
    action_space = UnicodeText(16, min_length=0)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", 0.0, False, False, {}


class NoopEnv(envhub.Env):
    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[envhub.Observation, dict[str, Any]]:
        return [], {}

    async def step(self, action: envhub.Action) -> envhub.StepResult:
        return envhub.StepResult([], 0.0, False, False, {})


class NoopChat(envhub.MultiTurnEnv):
    max_turns = 1_000_000_000

    def setup(self, rng: random.Random) -> str:
        return "go"

    def respond(self, text: str) -> str:
        return "ok"


def made(env: envhub.Env) -> envhub.Env:
    """`env` in the wrappers `envhub.make` puts around every env, with a limit no measurement reaches."""
    env.max_turns = 1 << 62
    return apply_wrappers(env)


def per_step_sync(step: Callable[[str], object], steps: int) -> float:
    started = time.perf_counter()
    for _ in range(steps):
        step("a")
    return (time.perf_counter() - started) / steps


async def per_step_async(env: envhub.Env, steps: int) -> float:
    await env.reset(seed=0)
    started = time.perf_counter()
    for _ in range(steps):
        await env.step("a")
    return (time.perf_counter() - started) / steps


def best_of(repeats: int, measure: Callable[[], float]) -> float:
    """The median of repeated measurements: robust to a noisy neighbour on a 2-core machine."""
    return statistics.median(measure() for _ in range(repeats))


async def concurrent_episodes(
    make_env: Callable[[], envhub.Env], episodes: int, steps: int
) -> tuple[float, int]:
    """Run `episodes` episodes at once on this loop; return wall time and how many failed."""

    async def one(seed: int) -> None:
        env = make_env()
        await env.reset(seed=seed)
        for _ in range(steps):
            await env.step("a")
        await env.close()

    started = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(episodes)), return_exceptions=True)
    return time.perf_counter() - started, sum(isinstance(r, BaseException) for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000, help="steps per measurement of the no-op envs")
    parser.add_argument("--chat-steps", type=int, default=5_000, help="steps per measurement of MultiTurnEnv")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=10_000, help="concurrent episodes on one loop")
    parser.add_argument("--episode-steps", type=int, default=10)
    args = parser.parse_args()

    raw = NoopGym()
    raw.reset(seed=0)
    wrapped = gym.wrappers.OrderEnforcing(gym.wrappers.PassiveEnvChecker(NoopGym()))
    wrapped.reset(seed=0)
    rows = {
        "gymnasium (raw)": best_of(args.repeats, lambda: per_step_sync(raw.step, args.steps)),
        "gymnasium + default wrappers": best_of(
            args.repeats, lambda: per_step_sync(wrapped.step, args.steps)
        ),
        "envhub Env (async)": best_of(
            args.repeats, lambda: asyncio.run(per_step_async(NoopEnv(), args.steps))
        ),
        "envhub Env + make()'s wrappers": best_of(
            args.repeats, lambda: asyncio.run(per_step_async(made(NoopEnv()), args.steps))
        ),
        "envhub MultiTurnEnv": best_of(
            args.repeats, lambda: asyncio.run(per_step_async(NoopChat(), args.chat_steps))
        ),
    }
    baseline = rows["gymnasium (raw)"]
    table = Table(title="Per-step overhead on a no-op environment (median of repeats)")
    table.add_column("implementation")
    table.add_column("µs / step", justify="right")
    table.add_column("× gymnasium (raw)", justify="right")
    for name, seconds in rows.items():
        table.add_row(name, f"{seconds * 1e6:.2f}", f"{seconds / baseline:.2f}")
    console = Console()
    console.print(table)
    ratio = rows["envhub Env (async)"] / baseline
    verdict = "[green]within[/]" if ratio <= GOAL else "[red]over[/]"
    console.print(f"async contract: {ratio:.2f}x gymnasium's raw step, {verdict} the {GOAL:.0f}x goal")

    concurrent = Table(
        title=f"{args.episodes:,} concurrent episodes × {args.episode_steps} steps on one event loop"
    )
    concurrent.add_column("environment")
    concurrent.add_column("wall s", justify="right")
    concurrent.add_column("steps / s", justify="right")
    concurrent.add_column("failed episodes", justify="right")
    for name, factory in (("envhub Env (async)", NoopEnv), ("envhub MultiTurnEnv", NoopChat)):
        wall, failed = asyncio.run(concurrent_episodes(factory, args.episodes, args.episode_steps))
        steps = args.episodes * args.episode_steps
        concurrent.add_row(name, f"{wall:.2f}", f"{steps / wall:,.0f}", str(failed))
        if failed:
            raise SystemExit(f"{failed} of {args.episodes} concurrent {name} episodes failed")
    console.print(concurrent)


if __name__ == "__main__":
    main()
