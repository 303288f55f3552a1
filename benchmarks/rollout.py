"""Rollout runner throughput and per-step latency, next to the env's own cost, in one run.

    python benchmarks/rollout.py [--episodes 400] [--steps 10] [--concurrency 1 8 64] [--ray]

(a) a no-op env: the runner's overhead per step is the CPU time per step through the runner (one event
    loop, so 1 / steps-per-second at any concurrency) minus the env stepped directly in a loop;
(b) a sandboxed code env: every step runs `python3 -c pass` in a bubblewrap sandbox; its throughput
    is compared with the same number of sandbox execs issued directly at the same concurrency, which
    is what two cores allow.
Latency is the time between consecutive policy calls within an episode (env step + runner work).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from rich.console import Console
from rich.table import Table

import envhub
import envhub.sandbox as sandbox
from envhub.messages import Message
from envhub.policies import Policy
from envhub.rollout import RolloutLimits, run_batch
from envhub.tools import ToolSpec


class Noop(envhub.Env):
    """The cheapest env the contract allows: `steps` turns of nothing."""

    max_turns = 10

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[envhub.Observation, dict[str, Any]]:
        self.turn = 0
        return [Message(role="user", content="go")], {"seed": seed}

    async def step(self, action: envhub.Action) -> envhub.StepResult:
        self.turn += 1
        return envhub.StepResult([], 0.0, False, self.turn >= self.max_turns, {})


class SandboxedCode(envhub.Env):
    """Each step runs one command in a bubblewrap sandbox held for the whole worker."""

    max_turns = 10

    def __init__(self) -> None:
        self.box: sandbox.Sandbox | None = None

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[envhub.Observation, dict[str, Any]]:
        self.box = self.box or await sandbox.open("local")
        self.turn = 0
        return [Message(role="user", content="run")], {"seed": seed}

    async def step(self, action: envhub.Action) -> envhub.StepResult:
        assert self.box is not None
        result = await self.box.exec(["python3", "-c", "pass"], timeout=30)
        self.turn += 1
        observation = [Message(role="user", content=str(result.exit_code))]
        return envhub.StepResult(observation, 0.0, False, self.turn >= self.max_turns, {})

    async def close(self) -> None:
        if self.box is not None:
            await self.box.close()


class Timed(Policy):
    """A scripted policy that records when it is asked to act, to time each step from the outside."""

    name = "timed"

    def __init__(self, gaps: list[float] | None = None) -> None:
        self.gaps = gaps if gaps is not None else []
        self.last: float | None = None

    def for_episode(self, env: envhub.Env) -> Policy:
        return Timed(self.gaps)

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> str:
        now = time.perf_counter()
        if self.last is not None:
            self.gaps.append(now - self.last)
        self.last = now
        return "x"


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


async def direct_noop(episodes: int, steps: int) -> float:
    """Seconds per step of the no-op env stepped in a plain loop: the env's own cost."""
    env = Noop()
    env.max_turns = steps
    started = time.perf_counter()
    for seed in range(episodes):
        await env.reset(seed=seed)
        for _ in range(steps):
            await env.step("x")
    return (time.perf_counter() - started) / (episodes * steps)


async def direct_sandbox(execs: int, concurrency: int) -> float:
    """Execs per second issued straight at sandboxes, `concurrency` at a time: what the machine allows."""
    boxes = [await sandbox.open("local") for _ in range(concurrency)]
    queue = list(range(execs))

    async def drain(box: sandbox.Sandbox) -> None:
        while queue:
            queue.pop()
            await box.exec(["python3", "-c", "pass"], timeout=30)

    started = time.perf_counter()
    await asyncio.gather(*(drain(box) for box in boxes))
    elapsed = time.perf_counter() - started
    for box in boxes:
        await box.close()
    return execs / elapsed


async def through_runner(env_id: str, episodes: int, concurrency: int) -> tuple[float, list[float], int]:
    """Steps per second, step latencies and failures of a batch run by the runner."""
    policy = Timed()
    limits = RolloutLimits(concurrency=concurrency)
    started = time.perf_counter()
    result = await run_batch(env_id, policy, episodes=episodes, limits=limits)
    elapsed = time.perf_counter() - started
    steps = sum(len(e.turns) for e in result.episodes)
    failures = sum(e.error is not None for e in result.episodes)
    return steps / elapsed, policy.gaps, failures


async def local_vs_ray(env_id: str, episodes: int, concurrency: int) -> tuple[float, float]:
    """Episodes per second of the same batch (installed env, oracle policy) on both backends."""
    import ray

    from envhub.policies import OraclePolicy
    from envhub.rollout.ray_runner import run_batch_ray

    limits = RolloutLimits(concurrency=concurrency)
    started = time.perf_counter()
    await run_batch(env_id, OraclePolicy(), episodes=episodes, limits=limits)
    local = episodes / (time.perf_counter() - started)
    started = time.perf_counter()
    await run_batch_ray(
        env_id, "oracle", episodes=range(episodes), seed=0, limits=limits, env_kwargs={}, on_episode=None
    )
    on_ray = episodes / (time.perf_counter() - started)
    assert ray.is_initialized()
    return local, on_ray


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=400, help="no-op episodes per row")
    parser.add_argument("--sandbox-episodes", type=int, default=24, help="sandboxed episodes per row")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--ray", action="store_true", help="also compare the local and Ray backends")
    parser.add_argument("--ray-episodes", type=int, default=64)
    args = parser.parse_args()
    Noop.max_turns = SandboxedCode.max_turns = args.steps
    envhub.register("bench/noop-v0", Noop)
    envhub.register("bench/sandboxed-code-v0", SandboxedCode)
    console = Console(width=150)

    own = asyncio.run(direct_noop(args.episodes, args.steps))
    table = Table(title=f"(a) no-op env, {args.episodes} episodes × {args.steps} steps, scripted policy")
    for column in (
        "concurrency",
        "steps / s",
        "p50 step µs",
        "p99 step µs",
        "runner overhead µs / step",
        "failures",
    ):
        table.add_column(column, justify="right")
    for concurrency in args.concurrency:
        rate, gaps, failures = asyncio.run(through_runner("bench/noop-v0", args.episodes, concurrency))
        table.add_row(
            str(concurrency),
            f"{rate:,.0f}",
            f"{percentile(gaps, 50) * 1e6:.0f}",
            f"{percentile(gaps, 99) * 1e6:.0f}",
            f"{(1 / rate - own) * 1e6:.1f}",
            str(failures),
        )
    console.print(table)
    console.print(f"the no-op env stepped directly: {own * 1e6:.2f} µs / step")

    table = Table(
        title=f"(b) sandboxed code env (bubblewrap), {args.sandbox_episodes} episodes × {args.steps} steps"
    )
    for column in (
        "concurrency",
        "steps / s via runner",
        "sandbox execs / s direct",
        "runner / direct",
        "p50 step ms",
        "p99 step ms",
        "failures",
    ):
        table.add_column(column, justify="right")
    for concurrency in [c for c in args.concurrency if c <= 8]:
        rate, gaps, failures = asyncio.run(
            through_runner("bench/sandboxed-code-v0", args.sandbox_episodes, concurrency)
        )
        direct = asyncio.run(direct_sandbox(args.sandbox_episodes * args.steps, concurrency))
        table.add_row(
            str(concurrency),
            f"{rate:,.1f}",
            f"{direct:,.1f}",
            f"{rate / direct:.0%}",
            f"{percentile(gaps, 50) * 1e3:.1f}",
            f"{percentile(gaps, 99) * 1e3:.1f}",
            str(failures),
        )
    console.print(table)
    if not args.ray:
        return
    import ray

    # A private instance ("local": never join a stale cluster), started once, outside the timings.
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    table = Table(
        title=f"(c) local vs Ray backend, {args.ray_episodes} episodes, oracle policy (Ray already started)"
    )
    for column in ("env", "concurrency", "local episodes / s", "Ray episodes / s", "Ray / local"):
        table.add_column(column, justify="right")
    for env_id in ("arithmetic-v0", "code-single-v0"):
        for concurrency in (1, 8):
            local, on_ray = asyncio.run(local_vs_ray(env_id, args.ray_episodes, concurrency))
            table.add_row(
                env_id, str(concurrency), f"{local:,.1f}", f"{on_ray:,.1f}", f"{on_ray / local:.0%}"
            )
    ray.shutdown()
    console.print(table)


if __name__ == "__main__":
    main()
